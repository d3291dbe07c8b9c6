"""Standard Webhooks signatures: how the broker signs a push and how a receiver checks one.

A signed request carries three headers (https://www.standardwebhooks.com):

- ``webhook-id``: the push's id, the same on every retry of it;
- ``webhook-timestamp``: seconds since the epoch when it was sent;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>``, several of them
  space-separated while a secret is being rotated (one per secret still valid).

A secret is ``whsec_<base64 key>``; the HMAC key is the decoded part. The broker signs with
:func:`signature_headers`; the driver's receiver checks with :class:`Verifier`, which also refuses a
timestamp too far from its own clock (a replayed or delayed request).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping

SECRET_PREFIX = "whsec_"
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
#: A request older or newer than this (seconds) is refused, as the Standard Webhooks libraries do.
DEFAULT_TOLERANCE_S = 300
_MAX_SIGNATURES = 8


class SignatureError(ValueError):
    """A push's signature is missing, malformed, stale or wrong."""


def new_secret() -> str:
    """A fresh random secret (24 bytes of key) in the ``whsec_`` form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_...`` secret.

    Raises:
        SignatureError: not a ``whsec_`` secret of base64 with at least 16 bytes of key.
    """
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise SignatureError("a secret looks like whsec_<base64>")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("the part after whsec_ is not base64") from None
    if not 16 <= len(key) <= 64:
        raise SignatureError("a secret's key must be 16 to 64 bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 signature>`` of one request."""
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def signature_headers(keys: Iterable[bytes], msg_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The three Standard Webhooks headers for ``body``, signed with every key (newest first)."""
    at = int(time.time()) if timestamp is None else timestamp
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(at),
            SIGNATURE_HEADER: " ".join(sign(k, msg_id, at, body) for k in keys)}


class Verifier:
    """Checks pushes against one or more secrets (several while a rotation overlaps)."""

    def __init__(self, secrets_: Iterable[str], *, tolerance_s: int = DEFAULT_TOLERANCE_S) -> None:
        self.keys = [secret_key(s) for s in secrets_]
        if not self.keys:
            raise SignatureError("a verifier needs at least one secret")
        self.tolerance_s = tolerance_s

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float | None = None) -> str:
        """The request's ``webhook-id`` if it is signed by one of the secrets and fresh.

        ``headers`` is looked up case-insensitively.

        Raises:
            SignatureError: saying what is wrong.
        """
        lower = {str(k).lower(): str(v) for k, v in headers.items()}
        msg_id, stamp, sent = lower.get(ID_HEADER), lower.get(TIMESTAMP_HEADER), lower.get(SIGNATURE_HEADER)
        if not msg_id or not stamp or not sent:
            raise SignatureError("the push is not signed (webhook-id, webhook-timestamp, webhook-signature)")
        if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
            raise SignatureError("webhook-timestamp is not a number of seconds")
        at = int(stamp)
        clock = time.time() if now is None else now
        if abs(clock - at) > self.tolerance_s:
            raise SignatureError(f"webhook-timestamp is more than {self.tolerance_s}s from now")
        offered = [part[3:] for part in sent.split(" ")[:_MAX_SIGNATURES] if part.startswith("v1,")]
        for key in self.keys:
            expected = sign(key, msg_id, at, body)[3:]
            if any(hmac.compare_digest(expected, candidate) for candidate in offered):
                return msg_id
        raise SignatureError("no signature matches")
