"""Push bodies per subscriber format: the envelope batch, CloudEvents 1.0 (structured or binary), unwrapped.

``envelope`` (the default) batches messages as ``{"subscriber_id", "topic", "group", "messages"}``.
The other formats carry one message per request:

- ``cloudevents``: a structured-mode event, ``application/cloudevents+json``;
- ``cloudevents-binary``: the raw body with the message's content type, attributes in ``ce-*``
  headers;
- ``unwrapped``: the raw body with the message's content type, metadata in ``toymb-*`` headers.

CloudEvents attributes: ``id`` the message id, ``source`` ``/toymb/topics/<topic>``, ``type``
``toymb.message``, ``subject`` the key, ``time`` the timestamp, ``datacontenttype`` the content type,
and the extensions ``toymbpartition``, ``toymboffset``, ``toymbgroup``, ``toymbattempt`` and
``toymbheaders`` (the message headers as a JSON object in a string). Header values that are not
printable ASCII are percent-encoded, as the CloudEvents HTTP binding says.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
from collections.abc import Callable
from itertools import repeat
from typing import Any
from urllib.parse import quote

import orjson

from ..envelope import MessageRow, decode_body, is_json_type, is_text_type, render_head
from ..strict_json import is_strict_json

CE_TYPE = "toymb.message"
STRUCTURED_TYPE = "application/cloudevents+json; charset=utf-8"
# Printable ASCII except '%' (and '"', which CloudEvents also escapes) stays as it is.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '%"')


def header_value(value: str) -> str:
    """``value`` made safe for an HTTP header: percent-encoded outside printable ASCII."""
    return quote(value, safe=_HEADER_SAFE)


# What an envelope's body member is for a content type: a JSON value, text, or base64.
_JSON, _TEXT, _BINARY = 0, 1, 2


@functools.lru_cache(maxsize=1024)
def _body_kind(content_type: str) -> int:
    """How :func:`~broker.envelope.decode_body` treats a content type, asked once per type (the
    parsing of the type cost as much as writing the rest of the envelope)."""
    return _JSON if is_json_type(content_type) else _TEXT if is_text_type(content_type) else _BINARY


def envelope_json(row: MessageRow, attempt: int) -> bytes:
    """A message's JSON envelope with its ``delivery_attempt`` (counted from 1), as UTF-8.

    Written by orjson (a tenth of the standard library's cost; this runs for every pushed
    message); an envelope orjson refuses (an integer beyond 64 bits in a JSON body) is written
    by the standard library, as before. Bytes, not text: the push body is bytes, and decoding
    each envelope only to encode the whole batch again copied every message twice more.

    A JSON body goes in as the bytes it is stored as, once checked to be JSON that
    :func:`~broker.strict_json.strict_json` accepts: parsing it into values only to write them
    again cost more than the rest of the envelope (a body with a 19-digit number, such as a
    nanosecond timestamp, was parsed by the standard library). The receiver reads the same
    value; only the spelling may differ from a re-encoding (spaces, escapes, a repeated key).
    The body member is the one :func:`~broker.envelope.decode_body` writes: JSON that is not
    strict, text that is not UTF-8 and other types go as ``body_base64``.
    """
    body = row.body if isinstance(row.body, bytes) else bytes(row.body)
    content_type = row.content_type
    envelope = render_head(row.topic, row.partition, row.offset, row.id, row.key, row.headers, row.timestamp,
                           content_type)
    envelope["delivery_attempt"] = attempt
    kind = _body_kind(content_type)
    if kind == _JSON and is_strict_json(body):
        return b"".join((_dumps(envelope)[:-1], b',"body":', body, b"}"))
    if kind == _TEXT:
        try:
            envelope["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            kind = _BINARY
    if kind != _TEXT:
        envelope["body_base64"] = base64.b64encode(body).decode("ascii")
    return _dumps(envelope)


def _dumps(envelope: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(envelope)
    except TypeError:
        return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def fit_envelopes(rows: list[Any], wanted: list[bool] | None, attempt: Callable[[Any], int],
                  max_bytes: int) -> tuple[list[Any], list[bytes]]:
    """A prefix of ``rows`` whose wanted messages' envelopes weigh at most ``max_bytes`` (at least
    one), and those envelopes. Each weighs its UTF-8 bytes and the comma that separates it from the
    next. Rows a filter left out (``wanted[i]`` false for ``rows[i]``) weigh nothing: they are not
    sent. ``wanted`` None: every row is (no filter)."""
    kept: list[Any] = []
    envelopes: list[bytes] = []
    total = 0
    for row, want in zip(rows, repeat(True) if wanted is None else wanted, strict=False):
        if want:
            text = envelope_json(row, attempt(row))
            total += len(text) + 1
            if envelopes and total > max_bytes:
                break
            envelopes.append(text)
        kept.append(row)
    return kept, envelopes


def _time(row: MessageRow) -> str:
    return dt.datetime.fromtimestamp(row.timestamp / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def _attributes(row: MessageRow, group: str, attempt: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {"specversion": "1.0", "id": row.id, "source": f"/toymb/topics/{row.topic}",
                             "type": CE_TYPE, "time": _time(row), "datacontenttype": row.content_type,
                             "toymbpartition": str(row.partition), "toymboffset": str(row.offset),
                             "toymbgroup": group, "toymbattempt": str(attempt), "toymbheaders": row.headers}
    if row.key is not None:
        attrs["subject"] = row.key
    return attrs


def single_body(fmt: str, row: MessageRow, subscriber_id: str, group: str,
                attempt: int) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a one-message push in format ``fmt`` (not ``envelope``)."""
    body = bytes(row.body)
    if fmt == "cloudevents":
        event = _attributes(row, group, attempt)
        decoded = decode_body(row.content_type, body)
        if "body" in decoded:  # a JSON value for JSON types, text for text types
            event["data"] = decoded["body"]
        else:
            event["data_base64"] = base64.b64encode(body).decode("ascii")
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return text, {"Content-Type": STRUCTURED_TYPE}
    if fmt == "cloudevents-binary":
        attrs = _attributes(row, group, attempt)
        headers = {"Content-Type": header_value(str(attrs.pop("datacontenttype")))}
        headers.update({f"ce-{name}": header_value(str(value)) for name, value in attrs.items()})
        return body, headers
    return body, {  # unwrapped
        "Content-Type": header_value(row.content_type), "toymb-id": header_value(row.id),
        "toymb-topic": row.topic, "toymb-group": group, "toymb-partition": str(row.partition),
        "toymb-offset": str(row.offset), "toymb-timestamp": str(row.timestamp),
        "toymb-delivery-attempt": str(attempt), "toymb-subscriber-id": subscriber_id,
        **({"toymb-key": header_value(row.key)} if row.key is not None else {}),
        "toymb-headers": header_value(row.headers if isinstance(row.headers, str) else json.dumps(row.headers)),
    }
