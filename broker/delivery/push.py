"""Push requests: the bodies a receiver gets, and retry delays (the client is :mod:`.pusher`)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any
from urllib.parse import urlsplit

from ..envelope import render_row
from ..errors import BadRequest

# ToyMB's messageId is a Java long; ours are (partition, offset), packed so the number stays
# unique within a topic and readable: partition 17, offset 42 -> 17000000000042.
_COMPAT_ID_STRIDE = 10**12


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
    return json.dumps(render_row(row), separators=(",", ":"), ensure_ascii=False)


def batch_body(subscriber_id: str, topic: str, group: str, envelopes: list[bytes]) -> bytes:
    """``{"subscriber_id", "topic", "group", "messages": [envelope...]}`` from pre-rendered UTF-8 envelopes."""
    head = json.dumps({"subscriber_id": subscriber_id, "topic": topic, "group": group},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"".join((head[:-1], b',"messages":[', b",".join(envelopes), b"]}"))


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
