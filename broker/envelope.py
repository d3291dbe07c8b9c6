"""The message envelope: validating the messages clients send, and rendering what the store holds.

The JSON it takes and gives is :mod:`.strict_json`'s; the ids it makes up, :mod:`.random_ids`'.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from .errors import BadRequest, LimitExceeded, PayloadTooLarge
from .random_ids import new_ids
from .strict_json import strict_json

T = TypeVar("T")

_INPUT_KEYS = frozenset({"id", "key", "headers", "body", "body_base64", "content_type", "timestamp"})
JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain"
BINARY_TYPE = "application/octet-stream"
CONTENT_TYPE_MAX = 200   # longest content_type
TIMESTAMP_END = 1 << 53  # a client's timestamp is below this (exact in a double)


@dataclass(frozen=True)
class Limits:
    max_body: int = 1 << 20
    max_headers: int = 64
    max_header_name: int = 256
    max_header_value: int = 8192
    max_id: int = 256

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        return cls(
            max_body=settings.max_body,
            max_headers=settings.max_headers,
            max_header_name=settings.max_header_name,
            max_header_value=settings.max_header_value,
            max_id=settings.max_id,
        )


class NewMessage(msgspec.Struct):
    """A validated message on its way into the store.

    A msgspec Struct, not a dataclass: made once per message published, its constructor is
    native (0.1 µs, where a slotted dataclass's generated ``__init__`` cost 0.25 µs).
    """

    id: str
    key: str | None
    headers: dict[str, str]
    content_type: str
    body: bytes
    timestamp: int = msgspec.field(default_factory=lambda: int(time.time() * 1000))
    # False when the broker made the id up: such an id cannot already be stored, so no look-up.
    given_id: bool = True


# Both run for every message published and delivered; a service uses few content types, and the
# caches are bounded.
@functools.lru_cache(maxsize=1024)
def is_json_type(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base == JSON_TYPE or base.endswith("+json")


@functools.lru_cache(maxsize=1024)
def is_text_type(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base.startswith("text/") or base.endswith(("+xml", "/xml"))


def _string(value: Any, what: str, max_len: int, *, allow_empty: bool = False, limit: str = "") -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string, not {type(value).__name__}", code="bad_field", field=what)
    if not value and not allow_empty:
        raise BadRequest(f"{what} must not be empty", code="bad_field", field=what)
    if len(value) > max_len:
        # ``limit`` is the stable name of the setting-backed limit (header_value, not the header's name).
        raise LimitExceeded(f"{what} is longer than {max_len} characters", limit=limit or what, max=max_len)
    if "\x00" in value:
        # PostgreSQL cannot store NUL in text; no field of a message has a use for it either.
        raise BadRequest(f"{what} holds a NUL character", code="bad_field", field=what)
    _utf8(value, what)
    return value


def _utf8(value: str, what: str) -> bytes:
    """``value`` as UTF-8; a lone surrogate (from a JSON ``\\udXXX`` escape) is a BadRequest."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} holds an unpaired UTF-16 surrogate", code="bad_field", field=what) from None


def _headers(value: Any, limits: Limits) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("headers must be an object of strings", code="bad_field", field="headers")
    if len(value) > limits.max_headers:
        raise LimitExceeded(f"more than {limits.max_headers} headers", limit="headers", max=limits.max_headers)
    for name, text in value.items():
        _string(name, "header name", limits.max_header_name, limit="header_name")
        _string(text, f"header {name!r}", limits.max_header_value, allow_empty=True, limit="header_value")
    return dict(value)


# What json.dumps(separators=(",", ":"), ensure_ascii=False, allow_nan=False) makes for each call:
# made once, as every JSON body of a publish is written with it.
_BODY_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_body(obj: dict[str, Any], content_type: str | None) -> tuple[bytes, str]:
    """Turn ``body`` or ``body_base64`` into stored bytes and their content type."""
    if "body_base64" in obj:
        if "body" in obj:
            raise BadRequest("give body or body_base64, not both", code="bad_field", field="body")
        encoded = obj["body_base64"]
        if not isinstance(encoded, str):
            raise BadRequest("body_base64 must be a base64 string", code="bad_field", field="body_base64")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("body_base64 is not valid base64", code="bad_field", field="body_base64") from None
        if content_type and is_json_type(content_type):
            # A JSON content type is a promise to consumers: keep it, or refuse the message now.
            try:
                strict_json(raw)
            except ValueError as exc:
                raise BadRequest(f"body_base64 is not JSON as content_type {content_type!r} says: {exc}",
                                 code="bad_field", field="body_base64") from None
        return raw, content_type or BINARY_TYPE
    if "body" not in obj:
        raise BadRequest("a message needs body or body_base64", code="bad_field", field="body")
    body = obj["body"]
    if content_type and not is_json_type(content_type) and isinstance(body, str):
        return _utf8(body, "body"), content_type
    try:
        text = _BODY_JSON.encode(body)
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON: {type(exc).__name__}", code="bad_field", field="body") from None
    return _utf8(text, "body"), content_type or JSON_TYPE


def parse_message(obj: Any, limits: Limits, new_id: str | None = None, now_ms: int | None = None) -> NewMessage:
    """Validate one message as a client sent it.

    ``new_id`` is its id when the client gave none (default: a fresh one); ``now_ms`` its
    timestamp when the client gave none (default: now).

    Raises:
        BadRequest: a field is missing, unknown or of the wrong type.
        PayloadTooLarge: the body is over ``limits.max_body`` bytes.
    """
    if not isinstance(obj, dict):
        raise BadRequest("a message must be a JSON object", code="bad_message")
    if not _INPUT_KEYS.issuperset(obj):
        unknown = set(obj) - _INPUT_KEYS
        raise BadRequest(f"unknown message fields: {', '.join(sorted(unknown))}", code="bad_message")
    msg_id = obj.get("id")
    given_id = msg_id is not None
    if given_id:
        msg_id = _string(msg_id, "id", limits.max_id)
    else:
        msg_id = new_id or new_ids(1)[0]
    key = obj.get("key")
    key = None if key is None else _string(key, "key", limits.max_id, allow_empty=True)
    content_type = obj.get("content_type")
    if content_type is not None:
        content_type = _string(content_type, "content_type", CONTENT_TYPE_MAX)
    body, content_type = encode_body(obj, content_type)
    if len(body) > limits.max_body:
        raise PayloadTooLarge(f"body of {len(body)} bytes is over the limit of {limits.max_body}",
                              limit="body", max=limits.max_body)
    message = NewMessage(msg_id, key, _headers(obj.get("headers"), limits), content_type, body,
                         int(time.time() * 1000) if now_ms is None else now_ms, given_id)
    timestamp = obj.get("timestamp")
    if timestamp is not None:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or not 0 <= timestamp < TIMESTAMP_END:
            raise BadRequest("timestamp must be milliseconds since the epoch", code="bad_field", field="timestamp")
        message.timestamp = timestamp
    return message


def decode_body(content_type: str, body: bytes) -> dict[str, Any]:
    """The ``body`` or ``body_base64`` member of an envelope for stored bytes.

    Never fails: bytes that are not what their content type says (JSON that is invalid, too deep,
    or holds NaN or a lone surrogate; text that is not UTF-8) are delivered as ``body_base64``.
    """
    if is_json_type(content_type):
        try:
            return {"body": strict_json(body)}
        except ValueError:
            pass
    elif is_text_type(content_type):
        try:
            return {"body": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"body_base64": base64.b64encode(body).decode("ascii")}


def render(topic: str, partition: int, offset: int, msg_id: str, key: str | None, headers: str | dict[str, str],
           timestamp: int, content_type: str, body: bytes) -> dict[str, Any]:
    """The JSON envelope of a stored message."""
    envelope = render_head(topic, partition, offset, msg_id, key, headers, timestamp, content_type)
    envelope.update(decode_body(content_type, body))
    return envelope


def render_head(topic: str, partition: int, offset: int, msg_id: str, key: str | None,
                headers: str | dict[str, str], timestamp: int, content_type: str) -> dict[str, Any]:
    """The JSON envelope of a stored message without its body."""
    return {
        "id": msg_id,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key,
        "headers": ({} if headers == "{}" else json.loads(headers)) if isinstance(headers, str) else headers,
        "timestamp": timestamp,
        "content_type": content_type,
    }


class MessageRow(Protocol):
    """A stored message as the store reads it (a database row, read by attribute)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def key(self) -> str | None: ...
    @property
    def headers(self) -> str: ...
    @property
    def content_type(self) -> str: ...
    @property
    def body(self) -> bytes | memoryview: ...
    @property
    def timestamp(self) -> int: ...


def render_row(row: MessageRow) -> dict[str, Any]:
    """The JSON envelope of a stored message."""
    return render(row.topic, row.partition, row.offset, row.id, row.key, row.headers, row.timestamp,
                  row.content_type, bytes(row.body))


def within(items: Iterable[T], size: Callable[[T], int], cap: int) -> list[T]:
    """The longest prefix of ``items`` weighing at most ``cap`` in all, and never less than the
    first item: a message larger than the cap still goes, alone. Stops reading ``items`` there."""
    kept: list[T] = []
    total = 0
    for item in items:
        total += size(item)
        if kept and total > cap:
            break
        kept.append(item)
    return kept
