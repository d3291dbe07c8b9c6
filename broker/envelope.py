"""The message envelope: parsing what clients send, and rendering what the store holds."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
import orjson

from .errors import BadRequest, LimitExceeded, PayloadTooLarge

T = TypeVar("T")

_INPUT_KEYS = frozenset({"id", "key", "headers", "body", "body_base64", "content_type", "timestamp"})
JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain"
BINARY_TYPE = "application/octet-stream"
# JSON deeper than this is refused at the door (and delivered as base64 if it got in some other
# way): every client library, and the broker's own renderer, can read it back.
MAX_JSON_DEPTH = 128
CONTENT_TYPE_MAX = 200   # longest content_type
TIMESTAMP_END = 1 << 53  # a client's timestamp is below this (exact in a double)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# An integer this long may not fit in 64 bits, where orjson would read it as a float. Found by
# mapping every digit to "0" and searching for the run: both run at memory speed, where a regex
# tried at every position cost a fifth of a batched publish.
_ALL_DIGITS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def may_hold_long_integer(raw: bytes) -> bool:
    """Whether ``raw`` has 19 or more digits in a row: an integer there may not fit in 64 bits."""
    return _LONG_DIGITS in raw.translate(_ALL_DIGITS_ZERO)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_tree(value: Any, check_text: bool) -> None:
    """Depth at most MAX_JSON_DEPTH; with ``check_text``, no string holds a lone surrogate."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
            if check_text:
                stack.extend((key, depth) for key in item)
        elif isinstance(item, list):
            children = item
        else:
            if check_text and isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("it holds an unpaired UTF-16 surrogate escape") from None
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"it is nested deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def strict_json(raw: bytes | str) -> Any:
    """Parse JSON that any consumer can read back, or raise ValueError saying what is wrong.

    Refused: invalid UTF-8, NaN, Infinity and numbers that overflow a double, lone surrogate
    escapes, and nesting deeper than MAX_JSON_DEPTH.

    orjson parses first (about five times faster than the standard library, and on the publish
    path for every request). It refuses all of the above itself except depth, and it accepts
    nothing the standard library refuses, but it reads an integer beyond 64 bits as a float: a
    document with 19 or more digits in a row, and every document orjson refuses, goes through the
    standard library, which keeps such integers exact and names what is wrong.
    """
    if isinstance(raw, bytes) and not may_hold_long_integer(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
                _check_tree(value, False)
            return value
    return _stdlib_strict_json(raw)


def is_strict_json(raw: bytes) -> bool:
    """Whether :func:`strict_json` accepts ``raw``, without keeping the value.

    orjson alone answers for most documents, big integers included: it reads one beyond 64 bits
    as a float, which only matters for the value, and it accepts nothing the standard library
    refuses. What it refuses goes through the standard library, which may still accept it.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
            return True
        try:
            _check_tree(value, False)
        except ValueError:
            return False
        return True
    try:
        _stdlib_strict_json(raw)
    except ValueError:
        return False
    return True


def _stdlib_strict_json(raw: bytes | str) -> Any:
    """:func:`strict_json` with the standard library alone (exact big integers, precise errors)."""
    if isinstance(raw, bytes):
        # json.loads would guess UTF-16 or UTF-32 and decode with "surrogatepass", so a lone
        # surrogate encoded as bytes (\xed\xa0\x80) would get through: JSON is UTF-8, strictly.
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"it is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"it is nested deeper than {MAX_JSON_DEPTH} levels") from None
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    check_text = _SURROGATE_ESCAPE.search(data) is not None
    # Cheap bound first: a document cannot nest deeper than it has brackets.
    if check_text or data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH:
        _check_tree(value, check_text)
    return value


def parse_json(raw: bytes, *, required: bool = True) -> Any:
    """A request body's JSON (None when empty and not ``required``), or BadRequest naming what is wrong."""
    if not raw:
        if required:
            raise BadRequest("the request needs a JSON body", code="bad_json")
        return None
    try:
        return strict_json(raw)
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8", code="bad_json") from None
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="bad_json") from None


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


class _RandomPool:
    """The system's random bytes, read ``IDS`` ids at a time, as hex, handed out once each.

    A read of the random source is a system call, and a single publish makes one id: one read per
    publish cost more than the rest of its id (and several times that on a loaded machine). A
    batch takes its ids from the pool too: ``os.urandom`` lets go of the GIL for its system call,
    and a worker thread that lets go of it while the writer or the loop holds it waits to get it
    back (two thread switches), once per batch when each batch read its own.
    """

    IDS = 2048   # 32 KiB of random bytes a read (64 KiB of hex digits held)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hex = ""
        self._at = 0
        os.register_at_fork(after_in_child=self._forget)   # a child must never hand out the parent's

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._hex, self._at = "", 0

    def take(self, count: int) -> tuple[str, int]:
        """Hex digits holding ``count`` unused ids of 32 digits, from the returned index on."""
        size = 32 * count
        if count > self.IDS // 4:
            return os.urandom(16 * count).hex(), 0   # a batch of over 512: a read of its own
        with self._lock:
            if self._at + size > len(self._hex):
                self._hex, self._at = os.urandom(16 * self.IDS).hex(), 0
            at = self._at
            self._at = at + size
            return self._hex, at


_random_pool = _RandomPool()


def new_ids(count: int) -> list[str]:
    """``count`` fresh message ids: 128 random bits each, as a UUID4 has (less its 6 fixed ones).

    From the system's random source, read for many ids at once (:class:`_RandomPool`).
    """
    pool, at = _random_pool.take(count)
    if count == 1:   # a single publish: no comprehension (a function call of its own in 3.11)
        return [pool[at : at + 32]]
    return [pool[i : i + 32] for i in range(at, at + 32 * count, 32)]


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
