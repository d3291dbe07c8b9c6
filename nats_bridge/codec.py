"""The seed ``003_…`` header protocol, version 1.0: a body with typed headers in one binary frame.

Byte-compatible with ``io.nats.bridge:nats-jms-bridge-message:1.0.4`` (``MessageBuilder`` decodes,
``BaseMessageWithHeaders`` encodes). All numbers are big-endian::

    AB CD 01 00                         MARKER_AB MARKER_CD MESSAGE_VERSION_MAJOR MESSAGE_VERSION_MINOR
    <count u8>                          common headers (only those set) + user headers
    count x (<name> <type> <value>)     name: one negative code byte (BRIDGE_*, ENV, H1..H4,
                                        ENVIRONMENT) or a length byte (0..127) + UTF-8
    <body length i32> <body hash i32> <body>     hash: h = 31*h + (b & 0xFF), int32; empty: 0 0

Where the reference is broken, this codec is stricter, never lossy:

- The encoder writes only frames the 1.0.4 decoder reads back to the same message. Small ints use
  the one-byte form for -109..127 (the reference's test is inverted); string lengths are UTF-8 byte
  counts (the reference writes UTF-16 units); a value or name that 1.0 cannot carry (an empty string,
  more than 65,535 bytes, a name over 127 bytes, more than 127 headers, an int beyond its type, a
  ``BRIDGE_*`` name used as a user header) is an :class:`EncodeError`, never silent corruption.
- The decoder raises :class:`DecodeError` (with a ``reason``) for a bad type, a bad length, a hash
  mismatch, truncation, bad UTF-8, an unknown name code or trailing bytes; the reference falls back to
  treating the whole buffer as the body. Only a buffer that does not start with ``AB CD`` is a raw
  body. It reads what the reference *encoder* writes for 128..255 headers and for string lengths of
  128..255 (unsigned bytes, where the reference decoder reads them signed and fails).
- A body that itself starts with ``AB CD`` is framed (with no headers), so it is not mistaken for a frame.
"""

from __future__ import annotations

import struct

from .errors import DecodeError, EncodeError
from .protocol import (
    COMMON_HEADER_CODES,
    COMMON_HEADERS,
    DECODE_REASONS,
    HEADER_KEY_CORRELATION_ID,
    HEADER_KEY_DELIVERY_TIME,
    HEADER_KEY_EXPIRATION_TIME,
    HEADER_KEY_MODE,
    HEADER_KEY_PRIORITY,
    HEADER_KEY_REDELIVERED,
    HEADER_KEY_TIMESTAMP,
    HEADER_KEY_TYPE,
    INT32_RANGE,
    INT64_RANGE,
    MARKER_AB,
    MARKER_CD,
    MAX_HEADERS,
    MAX_NAME_BYTES,
    MAX_SHORT_STRING_BYTES,
    MAX_STRING_BYTES,
    MESSAGE_VERSION_MAJOR,
    MESSAGE_VERSION_MINOR,
    METADATA_NAMES,
    NO_TYPE,
    RESERVED_START_TYPES,
    TYPE_BOOLEAN_FALSE,
    TYPE_BOOLEAN_TRUE,
    TYPE_BYTE,
    TYPE_DOUBLE,
    TYPE_FLOAT,
    TYPE_INT,
    TYPE_LONG,
    TYPE_SHORT,
    TYPE_SHORT_STRING,
    TYPE_STRING,
    BridgeMessage,
    Byte,
    Float32,
    HeaderValue,
    Long,
    Short,
    body_hash,
    check_range,
)

# The message types and constants live in .protocol; the ones users have always imported from
# here are re-exported.
__all__ = [
    "DECODE_REASONS", "MARKER_AB", "MARKER_CD", "MAX_HEADERS", "BridgeMessage", "Byte", "DecodeError",
    "EncodeError", "Float32", "HeaderValue", "Long", "Short", "body_hash", "decode", "encode",
]


# ------------------------------------------------------------------------------------ encoding
def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: Java would write '?' in their place, which is not the same string.
        raise EncodeError(f"{what} is not valid Unicode (lone surrogate): {text[:40]!r}") from None


def _string(out: bytearray, text: str, what: str) -> None:
    data = _utf8(text, what)
    if not data:
        raise EncodeError(f"{what} is an empty string, which version 1.0 cannot carry (1.0.4 refuses length 0)")
    if len(data) <= MAX_SHORT_STRING_BYTES:
        out += struct.pack(">bB", TYPE_SHORT_STRING, len(data))
    elif len(data) <= MAX_STRING_BYTES:
        out += struct.pack(">bH", TYPE_STRING, len(data))
    else:
        raise EncodeError(f"{what} is {len(data)} UTF-8 bytes; version 1.0 carries at most {MAX_STRING_BYTES}")
    out += data


def _name(out: bytearray, name: str) -> None:
    if not isinstance(name, str):
        raise EncodeError(f"header names are strings, not {type(name).__name__}: {name!r}")
    if name in METADATA_NAMES:
        raise EncodeError(f"header {name!r} is a BRIDGE_* name: the reference reads it as message metadata; "
                          "set the BridgeMessage field instead")
    code = COMMON_HEADERS.get(name)
    if code is not None:
        out += struct.pack(">b", code)
        return
    data = _utf8(name, f"header name {name[:40]!r}")
    if len(data) > MAX_NAME_BYTES:
        raise EncodeError(f"header name {name[:40]!r}... is {len(data)} UTF-8 bytes; version 1.0 carries at most "
                          f"{MAX_NAME_BYTES}")
    out += struct.pack(">B", len(data)) + data


def _value(out: bytearray, name: str, value: object) -> None:
    what = f"header {name[:40]!r}"
    if isinstance(value, bool):
        out += struct.pack(">b", TYPE_BOOLEAN_TRUE if value else TYPE_BOOLEAN_FALSE)
    elif isinstance(value, Byte):
        out += struct.pack(">bb", TYPE_BYTE, value)
    elif isinstance(value, Short):
        out += struct.pack(">bh", TYPE_SHORT, value)
    elif isinstance(value, Long):
        out += struct.pack(">bq", TYPE_LONG, value)
    elif isinstance(value, int):
        check_range(value, *INT32_RANGE, f"Integer ({what}; use Long for 64-bit values)")
        if RESERVED_START_TYPES <= value <= 127:
            out += struct.pack(">b", value)      # the "no cost" small int: the type byte is the value
        else:
            out += struct.pack(">bi", TYPE_INT, value)
    elif isinstance(value, Float32):
        out += struct.pack(">bf", TYPE_FLOAT, value)
    elif isinstance(value, float):
        out += struct.pack(">bd", TYPE_DOUBLE, value)
    elif isinstance(value, str):
        _string(out, value, what)
    else:
        raise EncodeError(f"{what} has a value of type {type(value).__name__}; version 1.0 carries str, bool, "
                          "int, float, Byte, Short, Long and Float32")


def _small(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodeError(f"{what} must be an int, not {type(value).__name__}")
    if value == -1 or not RESERVED_START_TYPES <= value <= 127:
        raise EncodeError(f"{what} {value} cannot be carried: version 1.0 writes it as one byte in -109..127, "
                          "and -1 means 'not set'")
    return value


def _time(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodeError(f"{what} must be an int (ms since the epoch), not {type(value).__name__}")
    if not 0 < value <= INT64_RANGE[1]:
        raise EncodeError(f"{what} {value} cannot be carried: version 1.0 writes it only when > 0")
    return value


def encode(message: BridgeMessage) -> bytes:
    """The bytes of ``message``: a 1.0 frame, or the raw body when there is nothing else to carry.

    Raises:
        EncodeError: the message holds something version 1.0 cannot carry; the text says what.
    """
    body = bytes(message.body)
    if not message.has_metadata() and body[:2] != b"\xab\xcd":
        return body
    out = bytearray(b"\xab\xcd\x01\x00\x00")
    count = 0
    # The reference's order: deliveryTime, mode, expiration, correlationID, timestamp, type, priority, redelivered.
    if message.delivery_time is not None:
        out += struct.pack(">bbq", -128, TYPE_LONG, _time(message.delivery_time, "delivery_time"))
        count += 1
    if message.mode is not None:
        out += struct.pack(">bb", -126, _small(message.mode, "mode"))
        count += 1
    if message.expiration_time is not None:
        out += struct.pack(">bbq", -125, TYPE_LONG, _time(message.expiration_time, "expiration_time"))
        count += 1
    if message.correlation_id is not None:
        out += struct.pack(">b", -121)
        _string(out, message.correlation_id, "correlation_id")
        count += 1
    if message.timestamp is not None:
        out += struct.pack(">bbq", -127, TYPE_LONG, _time(message.timestamp, "timestamp"))
        count += 1
    if message.type is not None:
        if message.type == NO_TYPE:
            raise EncodeError("type 'NO_TYPE' means 'not set' in version 1.0; use None")
        out += struct.pack(">b", -124)
        _string(out, message.type, "type")
        count += 1
    if message.priority is not None:
        out += struct.pack(">bb", -123, _small(message.priority, "priority"))
        count += 1
    if message.redelivered:
        out += struct.pack(">bb", -122, TYPE_BOOLEAN_TRUE)
        count += 1
    for name, value in message.headers.items():
        _name(out, name)
        _value(out, name, value)
        count += 1
    if count > MAX_HEADERS:
        raise EncodeError(f"{count} headers (with the metadata set); version 1.0 carries at most {MAX_HEADERS}")
    out[4] = count
    if body:
        out += struct.pack(">ii", len(body), body_hash(body))
        out += body
    else:
        out += b"\x00\x00\x00\x00\x00\x00\x00\x00"
    return bytes(out)


# ------------------------------------------------------------------------------------ decoding
class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.data) - self.pos:
            raise DecodeError("truncated", f"frame ends inside {what}: {n} bytes needed, "
                              f"{len(self.data) - self.pos} left", self.pos)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str) -> int | float:
        size = struct.calcsize(fmt)
        value: int | float = struct.unpack(fmt, self.take(size, what))[0]
        return value

    def text(self, n: int, what: str) -> str:
        start = self.pos
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("bad_utf8", f"{what} is not valid UTF-8", start) from None


def _read_value(r: _Reader, name: str) -> HeaderValue:
    at = r.pos
    kind = int(r.unpack(">b", f"the type of header {name!r}"))
    what = f"the value of header {name!r}"
    if kind >= RESERVED_START_TYPES:
        return kind
    if kind == TYPE_SHORT_STRING:
        return r.text(int(r.unpack(">B", what)), what)
    if kind == TYPE_STRING:
        return r.text(int(r.unpack(">H", what)), what)
    if kind == TYPE_BOOLEAN_TRUE:
        return True
    if kind == TYPE_BOOLEAN_FALSE:
        return False
    if kind == TYPE_BYTE:
        return Byte(int(r.unpack(">b", what)))
    if kind == TYPE_SHORT:
        return Short(int(r.unpack(">h", what)))
    if kind == TYPE_INT:
        return int(r.unpack(">i", what))
    if kind == TYPE_LONG:
        return Long(int(r.unpack(">q", what)))
    if kind == TYPE_FLOAT:
        return Float32(float(r.unpack(">f", what)))
    if kind == TYPE_DOUBLE:
        return float(r.unpack(">d", what))
    raise DecodeError("bad_type", f"header {name!r} has the unknown type code {kind}", at)


def _common(headers: dict[str, HeaderValue], name: str, want: type, at: int) -> HeaderValue | None:
    if name not in headers:
        return None
    value = headers.pop(name)
    ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
    if want is int and isinstance(value, (Byte, Short, Long)):
        ok = False      # the reference casts to Integer: only small ints and TYPE_INT qualify
    if want is Long and not isinstance(value, Long):
        ok = False
    if not ok:
        raise DecodeError("bad_common_header", f"{name} holds a {type(value).__name__}, not a {want.__name__}", at)
    return value


def decode(data: bytes) -> BridgeMessage:
    """The message in ``data``: a 1.0 frame, or (without the ``AB CD`` marker) a raw body.

    Raises:
        DecodeError: ``data`` starts with the marker but is not a valid 1.0 frame; ``reason`` says why.
    """
    data = bytes(data)
    if data[:2] != b"\xab\xcd":
        return BridgeMessage(body=data, framed=False)
    r = _Reader(data)
    r.take(2, "the marker")
    major, minor = r.take(2, "the version")
    if (major, minor) != (MESSAGE_VERSION_MAJOR, MESSAGE_VERSION_MINOR):
        raise DecodeError("unsupported_version", f"frame version {major}.{minor}; this codec reads 1.0", 2)
    # Unsigned: the 1.0.4 encoder writes counts of 128..255 this way (its decoder then fails on them).
    count = int(r.unpack(">B", "the header count"))
    headers: dict[str, HeaderValue] = {}
    for _ in range(count):
        at = r.pos
        first = int(r.unpack(">b", "a header name"))
        if first < 0:
            known = COMMON_HEADER_CODES.get(first)
            if known is None:
                raise DecodeError("bad_name", f"unknown header name code {first}", at)
            name = known
        else:
            name = r.text(first, "a header name")
        if name in headers:
            raise DecodeError("bad_name", f"header {name!r} appears twice", at)
        headers[name] = _read_value(r, name)
    at = r.pos
    length = int(r.unpack(">i", "the body length"))
    expected = int(r.unpack(">i", "the body hash"))
    if length < 0:
        raise DecodeError("bad_length", f"negative body length {length}", at)
    body = r.take(length, "the body")
    if body_hash(body) != expected:
        raise DecodeError("hash_mismatch", f"body hash {body_hash(body):#010x} != {expected & 0xFFFFFFFF:#010x} "
                          "in the frame", at)
    if r.pos != len(data):
        raise DecodeError("trailing_bytes", f"{len(data) - r.pos} bytes after the body", r.pos)
    # Lift the common headers out, with the types the reference casts them to.
    times = {key: _common(headers, key, Long, at) for key in
             (HEADER_KEY_TIMESTAMP, HEADER_KEY_EXPIRATION_TIME, HEADER_KEY_DELIVERY_TIME)}
    mode = _common(headers, HEADER_KEY_MODE, int, at)
    kind = _common(headers, HEADER_KEY_TYPE, str, at)
    correlation = _common(headers, HEADER_KEY_CORRELATION_ID, str, at)
    redelivered = _common(headers, HEADER_KEY_REDELIVERED, bool, at)
    priority = _common(headers, HEADER_KEY_PRIORITY, int, at)

    def _time_or_none(key: str) -> int | None:
        value = times[key]
        return int(value) if isinstance(value, int) else None

    return BridgeMessage(
        body=body, headers=headers,
        correlation_id=correlation if isinstance(correlation, str) else None,
        timestamp=_time_or_none(HEADER_KEY_TIMESTAMP),
        expiration_time=_time_or_none(HEADER_KEY_EXPIRATION_TIME),
        delivery_time=_time_or_none(HEADER_KEY_DELIVERY_TIME),
        mode=int(mode) if isinstance(mode, int) and mode != -1 else None,
        type=kind if isinstance(kind, str) and kind != NO_TYPE else None,
        priority=int(priority) if isinstance(priority, int) and priority != -1 else None,
        redelivered=bool(redelivered),
        framed=True,
    )
