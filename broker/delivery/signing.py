"""Signing pushes: Standard Webhooks headers with a push subscriber's current secrets.

The signature scheme itself is :mod:`driver.signatures` (the receiver checks with the same code's
verifier); this module picks the secrets still valid now, so during a rotation's overlap every
push carries a signature for the new secret and one for the old.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from driver.signatures import signature_headers

from ..store import now_ms
from .options import PushOptions

#: Tells a receiver serving several subscribers whose secret to check.
SUBSCRIBER_HEADER = "toymb-subscriber-id"


def push_headers(subscriber_id: str, options: PushOptions, push_id: str, body: bytes) -> dict[str, str]:
    """The headers that identify and sign one push (only the subscriber's id when it has no secret)."""
    headers = {SUBSCRIBER_HEADER: subscriber_id}
    keys = options.keys(now_ms())
    if keys:
        headers.update(signature_headers(keys, push_id, body))
    return headers


def push_id(group: str, pushed: Sequence[Any]) -> str:
    """A push's ``webhook-id``: the same on every retry of the same messages (rows with
    ``partition`` and ``offset``, in push order) to the same group."""
    first, last = pushed[0], pushed[-1]
    return f"toymb_{group}_{first.partition}_{first.offset}_{last.partition}_{last.offset}_{len(pushed)}"
