"""The vocabulary of the seed ``003_…`` header protocol, version 1.0: its constants, the Java-typed
header values and the message, as :mod:`nats_bridge.codec` encodes and decodes them.

Names follow the reference's ``Protocol.java`` (``io.nats.bridge:nats-jms-bridge-message:1.0.4``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Self, Union

from .errors import EncodeError

# Protocol.java's names.
MARKER_AB = -85            # 0xAB
MARKER_CD = -51            # 0xCD
MESSAGE_VERSION_MAJOR = 1
MESSAGE_VERSION_MINOR = 0
RESERVED_START_TYPES = -109
TYPE_SHORT_STRING = -110
TYPE_STRING = -111
TYPE_BOOLEAN_TRUE = -112
TYPE_BOOLEAN_FALSE = -113
TYPE_BYTE = -114
TYPE_SHORT = -116
TYPE_INT = -118
TYPE_LONG = -120
TYPE_FLOAT = -122
TYPE_DOUBLE = -123

HEADER_KEY_DELIVERY_TIME = "BRIDGE_deliveryTime"
HEADER_KEY_TIMESTAMP = "BRIDGE_timestamp"
HEADER_KEY_MODE = "BRIDGE_mode"
HEADER_KEY_EXPIRATION_TIME = "BRIDGE_expirationTime"
HEADER_KEY_TYPE = "BRIDGE_type"
HEADER_KEY_PRIORITY = "BRIDGE_priority"
HEADER_KEY_REDELIVERED = "BRIDGE_redelivered"
HEADER_KEY_CORRELATION_ID = "BRIDGE_correlation_id"

COMMON_HEADERS: dict[str, int] = {
    HEADER_KEY_DELIVERY_TIME: -128, HEADER_KEY_TIMESTAMP: -127, HEADER_KEY_MODE: -126,
    HEADER_KEY_EXPIRATION_TIME: -125, HEADER_KEY_TYPE: -124, HEADER_KEY_PRIORITY: -123,
    HEADER_KEY_REDELIVERED: -122, HEADER_KEY_CORRELATION_ID: -121,
    # Name shortcuts: ordinary user headers, written as one byte.
    "ENV": -120, "H1": -119, "H2": -118, "H3": -116, "H4": -115, "ENVIRONMENT": -114,
}
COMMON_HEADER_CODES: dict[int, str] = {code: name for name, code in COMMON_HEADERS.items()}
METADATA_NAMES = frozenset(list(COMMON_HEADERS)[:8])

MAX_HEADERS = 127
"""The 1.0.4 decoder reads the header count as a signed byte: 128 or more never decode."""
MAX_NAME_BYTES = 127
"""A name length byte of 128 or more reads as a (negative) name code."""
MAX_STRING_BYTES = 0xFFFF
MAX_SHORT_STRING_BYTES = 127
NO_TYPE = "NO_TYPE"

DECODE_REASONS = ("truncated", "unsupported_version", "bad_name", "bad_type", "bad_length", "bad_utf8",
                  "bad_common_header", "hash_mismatch", "trailing_bytes")

INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


class _JavaInt(int):
    """An ``int`` that travels as the Java integer type :attr:`JAVA`, checked to be in ``LOW..HIGH`` when made."""

    JAVA: ClassVar[str]
    LOW: ClassVar[int]
    HIGH: ClassVar[int]

    def __new__(cls, value: int) -> Self:
        check_range(int(value), cls.LOW, cls.HIGH, cls.JAVA)
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"{self.JAVA}({int(self)})"


class Byte(_JavaInt):
    """A Java ``Byte`` header value (-128..127); a plain ``int`` is a Java ``Integer``."""

    JAVA, LOW, HIGH = "Byte", -128, 127


class Short(_JavaInt):
    """A Java ``Short`` header value (-32768..32767)."""

    JAVA, LOW, HIGH = "Short", -32768, 32767


class Long(_JavaInt):
    """A Java ``Long`` header value (64-bit)."""

    JAVA, (LOW, HIGH) = "Long", INT64_RANGE


class Float32(float):
    """A Java ``Float`` header value: rounded to single precision when made, so what is sent is what it holds.

    A plain ``float`` is a Java ``Double``.
    """

    def __new__(cls, value: float) -> Float32:
        try:
            (single,) = struct.unpack(">f", struct.pack(">f", value))
        except OverflowError:
            raise EncodeError(f"{value!r} is beyond a Java Float's range") from None
        return super().__new__(cls, single)

    def __repr__(self) -> str:
        return f"Float32({float(self)!r})"


HeaderValue = Union[str, bool, int, float]  # noqa: UP007 - a runtime alias; Byte/Short/Long/Float32 are subclasses
"""``str`` String, ``bool`` Boolean, ``int`` Integer, ``float`` Double; Byte, Short, Long, Float32."""


def check_range(value: int, low: int, high: int, what: str) -> None:
    """An :class:`EncodeError` unless ``low <= value <= high`` (``what``: the Java type, for the text)."""
    if not low <= value <= high:
        raise EncodeError(f"{value} does not fit a Java {what} ({low}..{high})")


@dataclass(frozen=True)
class BridgeMessage:
    """A message of the protocol: a body, user headers, and the JMS metadata the frame carries.

    ``None`` means "not set" (the reference's -1 / ``NO_TYPE`` / null). ``framed`` says whether a
    decoded buffer was a frame (True) or a raw body (False); it is ignored by :func:`encode`.
    """

    body: bytes = b""
    headers: Mapping[str, HeaderValue] = field(default_factory=dict)
    correlation_id: str | None = None
    timestamp: int | None = None
    expiration_time: int | None = None
    delivery_time: int | None = None
    mode: int | None = None
    type: str | None = None
    priority: int | None = None
    redelivered: bool = False
    framed: bool = field(default=True, compare=False)

    def has_metadata(self) -> bool:
        """True when anything besides the body must travel (so the message needs a frame)."""
        return bool(self.headers) or self.redelivered or any(
            v is not None for v in (self.correlation_id, self.timestamp, self.expiration_time,
                                    self.delivery_time, self.mode, self.type, self.priority))


def body_hash(body: bytes) -> int:
    """The reference's body hash: ``h = 31*h + (b & 0xFF)`` from 0, as a signed int32."""
    h = 0
    for b in body:
        h = (31 * h + b) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def same_value(a: HeaderValue, b: HeaderValue) -> bool:
    """Equal as Java values: same Java type and same value (NaN equals NaN, as in ``Double.equals``)."""
    if _java_type(a) != _java_type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack(">d", a) == struct.pack(">d", b) or (math.isnan(a) and math.isnan(b))
    return a == b


def _java_type(value: HeaderValue) -> str:
    for kind, name in ((bool, "Boolean"), (Byte, "Byte"), (Short, "Short"), (Long, "Long"), (int, "Integer"),
                       (Float32, "Float"), (float, "Double"), (str, "String")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def java_type(value: HeaderValue) -> str:
    """The Java class a header value travels as: String, Boolean, Byte, Short, Integer, Long, Float, Double."""
    return _java_type(value)
