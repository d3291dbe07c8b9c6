"""A publish body decoded and checked in one native pass, for the bodies that are plainly valid.

:func:`broker.envelope.parse_message` stays the one definition of a valid message. Parsing a body
into Python objects first (``strict_json``) and then walking them cost about a quarter of a batched
publish. Here msgspec decodes the body straight into typed structs, in C, and only the limits are
checked in Python.

:func:`decode_publish` takes only bodies it can prove valid under the same rules, and gives the
same messages for them. For anything else it answers None: the caller then parses the body the
whole way and accepts or refuses it there, with the precise error. That covers every refusal, and
the rare shapes that need the standard library anyway: NUL characters, integers beyond 64 bits,
deep JSON bodies. ``tests/broker/test_publish_decode.py`` checks that both ways agree.
"""

from __future__ import annotations

import time

import msgspec
import orjson

from .envelope import (
    CONTENT_TYPE_MAX,
    MAX_JSON_DEPTH,
    TIMESTAMP_END,
    Limits,
    NewMessage,
    encode_body,
    is_json_type,
    may_hold_long_integer,
    new_ids,
)
from .errors import BrokerError


class _Message(msgspec.Struct, forbid_unknown_fields=True):
    """One message as a client sends it; absent and null fields mean what they mean to parse_message."""

    id: str | None = None
    key: str | None = None
    headers: dict[str, str] | None = None
    # Kept as the body's raw JSON: its shape depends on content_type, decided after decoding.
    body: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    body_base64: str | msgspec.UnsetType = msgspec.UNSET
    content_type: str | None = None
    timestamp: int | None = None


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[_Message]


_SINGLE = msgspec.json.Decoder(_Message)
_BATCH = msgspec.json.Decoder(_Batch)
_TEXT = msgspec.json.Decoder(str)
# How deep a message's body sits in the document: strict_json's depth limit counts from the root.
_BODY_DEPTH_SINGLE = 1
_BODY_DEPTH_BATCH = 3


def decode_publish(raw: bytes, limits: Limits, max_batch: int) -> tuple[list[NewMessage], bool] | None:
    """The messages of a publish body and whether it was a batch, as ``Publisher.parse_payload``
    gives them for ``strict_json(raw)``; None when the body must take that way instead."""
    if b"\\u0000" in raw or may_hold_long_integer(raw):
        return None
    try:
        if raw.lstrip()[:11] == b'{"messages"':
            items = _BATCH.decode(raw).messages
            if not 0 < len(items) <= max_batch:
                return None
            is_batch, depth = True, _BODY_DEPTH_BATCH
        else:
            items, is_batch, depth = [_SINGLE.decode(raw)], False, _BODY_DEPTH_SINGLE
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # msgspec recurses into nested JSON
        return None
    now_ms = int(time.time() * 1000)
    fresh_ids = new_ids(len(items))
    messages = []
    for item, fresh_id in zip(items, fresh_ids, strict=True):
        message = _message(item, limits, depth, fresh_id, now_ms)
        if message is None:
            return None
        messages.append(message)
    return messages, is_batch


def _message(item: _Message, limits: Limits, depth: int, fresh_id: str, now_ms: int) -> NewMessage | None:
    msg_id, key, content_type, headers = item.id, item.key, item.content_type, item.headers
    if ((msg_id is not None and not 0 < len(msg_id) <= limits.max_id)
            or (key is not None and len(key) > limits.max_id)
            or (content_type is not None and not 0 < len(content_type) <= CONTENT_TYPE_MAX)
            or (item.timestamp is not None and not 0 <= item.timestamp < TIMESTAMP_END)):
        return None
    if headers is None:
        headers = {}
    elif len(headers) > limits.max_headers or not all(
            0 < len(name) <= limits.max_header_name and len(value) <= limits.max_header_value
            for name, value in headers.items()):
        return None
    body = _body(item, content_type, depth)
    if body is None or len(body[0]) > limits.max_body:
        return None
    return NewMessage(fresh_id if msg_id is None else msg_id, key, headers, body[1], body[0],
                      now_ms if item.timestamp is None else item.timestamp, msg_id is not None)


def _body(item: _Message, content_type: str | None, depth: int) -> tuple[bytes, str] | None:
    """The stored bytes and content type, as :func:`broker.envelope.encode_body` makes them."""
    raw = item.body
    if isinstance(raw, msgspec.UnsetType):
        if isinstance(item.body_base64, msgspec.UnsetType):
            return None
        try:
            return encode_body({"body_base64": item.body_base64}, content_type)
        except BrokerError:  # a refusal: the whole way names it
            return None
    if not isinstance(item.body_base64, msgspec.UnsetType):
        return None
    data = bytes(raw)
    try:
        if content_type is not None and not is_json_type(content_type) and data[:1] == b'"':
            return _TEXT.decode(data).encode("utf-8"), content_type
        if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH - depth:
            return None
        return encode_body({"body": orjson.loads(data)}, content_type)
    except (msgspec.DecodeError, orjson.JSONDecodeError, ValueError, BrokerError):
        return None
