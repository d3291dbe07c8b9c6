"""A publish body decoded and checked in one native pass, for the bodies that are plainly valid.

:func:`broker.envelope.parse_message` stays the one definition of a valid message. Parsing a body
into Python objects first (``strict_json``) and then walking them cost about a quarter of a batched
publish. Here msgspec decodes the body straight into typed structs, in C, with the node's limits
declared on their fields (checked in C as well); only a message's body is left to Python.

:func:`decode_publish` takes only bodies it can prove valid under the same rules, and gives the
same messages for them. For anything else it answers None: the caller then parses the body the
whole way and accepts or refuses it there, with the precise error. That covers every refusal, and
the rare shapes that need the standard library anyway: NUL characters, integers beyond 64 bits,
deep JSON bodies. ``tests/broker/test_publish_decode.py`` checks that both ways agree.
"""

from __future__ import annotations

import functools
import time
from typing import Annotated, Any

import msgspec
import orjson

from .envelope import (
    CONTENT_TYPE_MAX,
    TIMESTAMP_END,
    Limits,
    NewMessage,
    encode_body,
    is_json_type,
)
from .errors import BrokerError
from .random_ids import new_ids
from .strict_json import MAX_JSON_DEPTH, may_hold_long_integer


def _decoders(limits: Limits) -> tuple[msgspec.json.Decoder[Any], ...]:
    """Decoders of one message and of a batch, with every limit of ``limits`` checked natively:
    (single, batch) with each body kept as raw JSON, then (single, batch) that take only string
    bodies, decoded natively too (the common case: the body is text).

    A message as a client sends it; absent and null fields mean what they mean to parse_message.
    Lengths are in characters, as ``len`` counts them; a value over a limit fails the decoding,
    and the whole way then names the limit.
    """
    def text(low: int, high: int) -> Any:
        return Annotated[str, msgspec.Meta(min_length=low, max_length=high)]

    headers = Annotated[dict[text(1, limits.max_header_name), text(0, limits.max_header_value)],  # type: ignore[misc,valid-type]
                        msgspec.Meta(max_length=limits.max_headers)]

    def decoders(body: Any) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
        message = msgspec.defstruct("_Message", [
            ("id", text(1, limits.max_id) | None, None),
            ("key", text(0, limits.max_id) | None, None),
            ("headers", headers | None, None),
            ("body", body, msgspec.UNSET),
            ("body_base64", str | msgspec.UnsetType, msgspec.UNSET),
            ("content_type", text(1, CONTENT_TYPE_MAX) | None, None),
            ("timestamp", Annotated[int, msgspec.Meta(ge=0, lt=TIMESTAMP_END)] | None, None),
        ], forbid_unknown_fields=True)
        batch = msgspec.defstruct("_Batch", [("messages", list[message])], forbid_unknown_fields=True)  # type: ignore[valid-type]
        return msgspec.json.Decoder(message), msgspec.json.Decoder(batch)

    # Kept as the body's raw JSON: its shape depends on content_type, decided after decoding.
    return (*decoders(msgspec.Raw | msgspec.UnsetType), *decoders(str | msgspec.UnsetType))


# The node's limits are one value for its life; tests try a few more.
_decoders_cached = functools.lru_cache(maxsize=8)(_decoders)
# The limits asked for last and their decoders, as one tuple (replaced whole, so a thread never
# sees one's limits with another's decoders): the same Limits object comes with every publish of
# a node, and hashing its five fields for the cache cost about 0.35 µs a request.
_last: tuple[Limits | None, tuple[msgspec.json.Decoder[Any], ...]] = (None, ())


def _decoders_for(limits: Limits) -> tuple[msgspec.json.Decoder[Any], ...]:
    global _last
    last_limits, decoders = _last
    if last_limits is not limits:
        decoders = _decoders_cached(limits)
        _last = (limits, decoders)
    return decoders
_TEXT = msgspec.json.Decoder(str)
UNSET = msgspec.UNSET
# How deep a message's body sits in the document: strict_json's depth limit counts from the root.
_BODY_DEPTH_SINGLE = 1
_BODY_DEPTH_BATCH = 3


def decode_publish(raw: bytes, limits: Limits, max_batch: int) -> tuple[list[NewMessage], bool] | None:
    """The messages of a publish body and whether it was a batch, as ``Publisher.parse_payload``
    gives them for ``strict_json(raw)``; None when the body must take that way instead."""
    # A backslash is found at memory speed (memchr); searching every body for the six bytes of
    # an escaped NUL cost more than decoding the whole batch (bytes' search is no memchr).
    if b"\\" in raw and b"\\u0000" in raw:
        return None
    single, batch, text_single, text_batch = _decoders_for(limits)
    is_batch = raw.lstrip()[:11] == b'{"messages"'
    items = None
    if _first_body_is_text(raw):
        # Likely all string bodies: decoded natively to the end. Any other body fails this
        # decoding at once, and the body is decoded again below, keeping each body's raw JSON.
        try:
            items = text_batch.decode(raw).messages if is_batch else [text_single.decode(raw)]
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # msgspec recurses into nested JSON
            pass
    texts = items is not None
    if items is None:
        try:
            items = batch.decode(raw).messages if is_batch else [single.decode(raw)]
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
    if is_batch and not 0 < len(items) <= max_batch:
        return None
    now_ms = int(time.time() * 1000)
    depth = _BODY_DEPTH_BATCH if is_batch else _BODY_DEPTH_SINGLE
    max_body = limits.max_body
    messages: list[NewMessage] = []
    append = messages.append
    # Whether the content type of the message before was a text type (not JSON): a batch's
    # messages mostly share one, and comparing it costs less than reading it again.
    last_type: str | None = None
    plain = False
    for item, fresh_id in zip(items, new_ids(len(items)), strict=True):
        # Every field is within its limits already (the decoder checked them); only the body is left.
        content_type, text = item.content_type, item.body
        if content_type != last_type:
            last_type, plain = content_type, content_type is not None and not is_json_type(content_type)
        if texts and plain and text is not UNSET and item.body_base64 is UNSET:
            try:   # the usual message, inline: a text body of a text type
                data = text.encode("utf-8")
            except UnicodeEncodeError:   # a lone surrogate: the whole way names it
                return None
        else:
            body = _text_body(item, content_type) if texts else _body(item, content_type, depth)
            if body is None:
                return None
            data, content_type = body
        if len(data) > max_body:
            return None
        msg_id, timestamp = item.id, item.timestamp
        append(NewMessage(fresh_id if msg_id is None else msg_id, item.key, item.headers or {}, content_type, data,
                          now_ms if timestamp is None else timestamp, msg_id is not None))
    return messages, is_batch


def _first_body_is_text(raw: bytes) -> bool:
    """Whether the first ``"body"`` of ``raw`` is followed by a string: then the body is likely a
    batch of string bodies, worth the decoder that takes only those (any other body fails it at
    once, and the raw-JSON decoder takes the body). Only a guess of which decoder to try first:
    both give the same messages. Looked at once, near the start, not searched for through the
    whole body: ``json.dumps`` writes ``"body": "``, and a search for ``"body":"`` that finds
    nothing reads every byte."""
    at = raw.find(b'"body"')
    if at < 0:
        return False
    after = raw[at + 6 : at + 64].lstrip()
    return after[:1] == b":" and after[1:].lstrip()[:1] == b'"'


def _text_body(item: Any, content_type: str | None) -> tuple[bytes, str] | None:
    """:func:`_body` of a message whose body, if any, is a string (decoded natively)."""
    text = item.body
    if text is UNSET:
        return _body(item, content_type, _BODY_DEPTH_SINGLE)   # body_base64 or nothing: no raw JSON is read
    if item.body_base64 is not UNSET:
        return None
    try:
        if content_type is not None and not is_json_type(content_type):
            return text.encode("utf-8"), content_type
        return encode_body({"body": text}, content_type)
    except (ValueError, BrokerError):  # a lone surrogate: the whole way names it
        return None


def _body(item: Any, content_type: str | None, depth: int) -> tuple[bytes, str] | None:
    """The stored bytes and content type, as :func:`broker.envelope.encode_body` makes them."""
    raw, encoded = item.body, item.body_base64
    if raw is UNSET:  # a singleton: cheaper to compare than isinstance, once per message
        if encoded is UNSET:
            return None
        try:
            return encode_body({"body_base64": encoded}, content_type)
        except BrokerError:  # a refusal: the whole way names it
            return None
    if encoded is not UNSET:
        return None
    try:
        if content_type is not None and not is_json_type(content_type) and memoryview(raw)[0] == 0x22:  # '"'
            return _TEXT.decode(raw).encode("utf-8"), content_type
        data = bytes(raw)
        # Only a body is read by orjson, which reads an integer beyond 64 bits as a float; the
        # decoder refuses one anywhere else (no other field is an unbounded number).
        if may_hold_long_integer(data):
            return None
        if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH - depth:
            return None
        return encode_body({"body": orjson.loads(data)}, content_type)
    except (msgspec.DecodeError, orjson.JSONDecodeError, ValueError, BrokerError):
        return None
