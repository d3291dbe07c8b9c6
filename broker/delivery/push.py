"""Push requests: the bodies a receiver gets, one pooled HTTP session, and retry delays."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from ..errors import BadRequest
from ..store import Store

# ToyMB's messageId is a Java long; ours are (partition, offset), packed so the number stays
# unique within a topic and readable: partition 17, offset 42 -> 17000000000042.
_COMPAT_ID_STRIDE = 10**12
_MAX_ANSWER = 64 * 1024


def check_http_url(url: Any) -> str:
    """``url`` if it is an absolute http(s) URL with a host, else BadRequest."""
    if not isinstance(url, str) or len(url) > 2048:
        raise BadRequest("url must be an http(s) URL string of at most 2048 characters", code="bad_url")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise BadRequest(f"url {url!r} is not a valid URL", code="bad_url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest("url must be an absolute http:// or https:// URL", code="bad_url")
    return url


def backoff_s(attempt: int, base_ms: int, max_ms: int) -> float:
    """Delay before retry number ``attempt`` (1-based): exponential, capped, with "equal jitter"
    (half fixed, half random) so that many failing lanes do not retry in lockstep."""
    delay = min(max_ms, base_ms * (2 ** min(max(attempt - 1, 0), 30)))
    return float(delay / 2 + random.uniform(0, delay / 2)) / 1000.0


def envelope_json(row: Any) -> str:
    return json.dumps(Store.envelope(row), separators=(",", ":"), ensure_ascii=False)


def batch_body(subscriber_id: str, topic: str, group: str, envelopes: list[str]) -> bytes:
    """``{"subscriber_id", "topic", "group", "messages": [envelope...]}`` from pre-rendered envelopes."""
    head = json.dumps({"subscriber_id": subscriber_id, "topic": topic, "group": group},
                      separators=(",", ":"), ensure_ascii=False)
    return (head[:-1] + ',"messages":[' + ",".join(envelopes) + "]}").encode("utf-8")


def compat_message_id(partition: int, offset: int) -> int:
    return partition * _COMPAT_ID_STRIDE + offset


def entity_text(body: bytes) -> str:
    """A stored body as ToyMB's ``entity`` string: the text itself, or base64 when it is not UTF-8."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii")


def compat_body(topic: str, subscriber_id: str, row: Any) -> bytes:
    """ToyMB's NotificationMessage: ``{topicName, forSubscriber, messageId, entity}``."""
    return json.dumps({"topicName": topic, "forSubscriber": subscriber_id,
                       "messageId": compat_message_id(row.partition, row.offset),
                       "entity": entity_text(bytes(row.body))}, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str
    # The receiver could not be reached at all: a fault of the subscriber, not of the message.
    unreachable: bool = False


class Pusher:
    """POSTs to receivers over one pooled session; never follows redirects."""

    def __init__(self, timeout_ms: int, pool_size: int) -> None:
        self.timeout = timeout_ms / 1000.0
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=32, pool_maxsize=max(4, pool_size), max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.trust_env = False  # a proxy from the environment must not see subscriber traffic

    def post(self, url: str, body: bytes) -> Outcome:
        try:
            resp = self.session.post(url, data=body, headers={"Content-Type": "application/json"},
                                     timeout=self.timeout, allow_redirects=False, stream=True)
        except requests.ConnectionError as exc:  # includes ConnectTimeout: nobody answered
            return Outcome(False, f"unreachable: {type(exc).__name__}", unreachable=True)
        except requests.Timeout:
            return Outcome(False, f"timeout after {self.timeout:g}s")
        except requests.RequestException as exc:
            return Outcome(False, f"request failed: {type(exc).__name__}")
        try:
            # Read a bounded answer so the connection can go back to the pool; a larger one is dropped.
            resp.raw.read(_MAX_ANSWER, decode_content=False)
        except Exception:  # noqa: BLE001 - the status is all that counts
            pass
        finally:
            resp.close()
        if 200 <= resp.status_code < 300:
            return Outcome(True, f"http {resp.status_code}")
        return Outcome(False, f"http {resp.status_code}")

    def close(self) -> None:
        self.session.close()
