"""Properties of the header protocol codec: round-trips, every refusal, and hostile frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nats_bridge.codec import decode, encode
from nats_bridge.errors import DecodeError, EncodeError
from nats_bridge.protocol import (
    COMMON_HEADERS,
    DECODE_REASONS,
    BridgeMessage,
    Byte,
    Float32,
    HeaderValue,
    Long,
    Short,
    body_hash,
    same_value,
)

SHORTCUTS = ["ENV", "H1", "H2", "H3", "H4", "ENVIRONMENT"]
texts = st.text(min_size=1, max_size=300).filter(lambda s: 0 < len(s.encode("utf-8", "surrogatepass")) <= 0xFFFF)
valid_texts = texts.filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))
names = st.one_of(st.sampled_from(SHORTCUTS), st.text(max_size=40).filter(
    lambda s: len(s.encode("utf-8", "surrogatepass")) <= 127 and not any(0xD800 <= ord(c) <= 0xDFFF for c in s)
    and not s.startswith("BRIDGE_")))
values: st.SearchStrategy[HeaderValue] = st.one_of(
    valid_texts, st.booleans(), st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-128, 127).map(Byte), st.integers(-32768, 32767).map(Short),
    st.integers(-(1 << 63), (1 << 63) - 1).map(Long),
    st.floats(width=32).map(Float32), st.floats(allow_nan=True))
small = st.integers(-109, 127).filter(lambda v: v != -1)
times = st.integers(1, (1 << 63) - 1)
messages = st.builds(
    BridgeMessage, body=st.binary(max_size=600), headers=st.dictionaries(names, values, max_size=20),
    correlation_id=st.none() | valid_texts, timestamp=st.none() | times, expiration_time=st.none() | times,
    delivery_time=st.none() | times, mode=st.none() | small,
    type=st.none() | valid_texts.filter(lambda t: t != "NO_TYPE"),
    priority=st.none() | small, redelivered=st.booleans())


def same_message(a: BridgeMessage, b: BridgeMessage) -> bool:
    heads_a, heads_b = dict(a.headers), dict(b.headers)
    return (a.body, a.correlation_id, a.timestamp, a.expiration_time, a.delivery_time, a.mode, a.type, a.priority,
            a.redelivered) == (b.body, b.correlation_id, b.timestamp, b.expiration_time, b.delivery_time, b.mode,
                               b.type, b.priority, b.redelivered) and heads_a.keys() == heads_b.keys() and all(
        same_value(heads_a[k], heads_b[k]) for k in heads_a)


@given(messages)
@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_every_message_round_trips_with_its_java_types(message: BridgeMessage) -> None:
    data = encode(message)
    back = decode(data)
    assert same_message(back, message)
    assert back.framed == (message.has_metadata() or message.body[:2] == b"\xab\xcd")
    assert data == encode(back)


@given(st.binary(max_size=200).filter(lambda b: b[:2] != b"\xab\xcd"))
@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
def test_a_buffer_without_the_marker_is_a_raw_body(data: bytes) -> None:
    message = decode(data)
    assert message.body == data and not message.framed and not message.has_metadata()
    assert encode(message) == data


@given(st.binary(max_size=100))
@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
def test_a_body_that_looks_like_a_frame_is_framed_not_mistaken(tail: bytes) -> None:
    body = b"\xab\xcd" + tail
    data = encode(BridgeMessage(body=body))
    assert data != body and decode(data).body == body


def test_the_reference_hash_and_layout() -> None:
    assert body_hash(b"hi") == 0x0D01
    framed = encode(BridgeMessage(body=b"hi", headers={"ENV": 5}))
    assert framed == bytes.fromhex("abcd0100 01 88 05 00000002 00000d01 6869")
    assert encode(BridgeMessage(body=b"", priority=4)) == bytes.fromhex("abcd0100 01 8504 00000000 00000000")
    # small ints -109..127 are one byte; the reference's inverted test wrote -127..-110 as one byte (colliding)
    assert encode(BridgeMessage(headers={"a": -110}))[5:] == bytes.fromhex("01 61 8a ffffff92 0000000000000000")
    assert encode(BridgeMessage(headers={"a": -109}))[5:] == bytes.fromhex("01 61 93 0000000000000000")


# ------------------------------------------------------------------------------------ refusals
REFUSED: list[tuple[str, BridgeMessage]] = [
    ("empty string value", BridgeMessage(headers={"a": ""})),
    ("string over 65535 bytes", BridgeMessage(headers={"a": "é" * 40000})),
    ("name over 127 bytes", BridgeMessage(headers={"é" * 64: 1})),
    ("128 headers", BridgeMessage(headers={f"h{i}": i for i in range(128)})),
    ("127 headers plus a correlation id", BridgeMessage(headers={f"h{i}": i for i in range(127)},
                                                         correlation_id="c")),
    ("Integer beyond int32", BridgeMessage(headers={"a": 1 << 31})),
    ("a BRIDGE_* name as a user header", BridgeMessage(headers={"BRIDGE_type": "x"})),
    ("mode -1", BridgeMessage(mode=-1)),
    ("mode beyond one byte", BridgeMessage(mode=300)),
    ("priority colliding with a type code", BridgeMessage(priority=-110)),
    ("timestamp 0", BridgeMessage(timestamp=0)),
    ("negative expiration", BridgeMessage(expiration_time=-5)),
    ("type NO_TYPE", BridgeMessage(type="NO_TYPE")),
    ("empty correlation id", BridgeMessage(correlation_id="")),
    ("bytes value", BridgeMessage(headers={"a": b"x"})),  # type: ignore[dict-item]
    ("None value", BridgeMessage(headers={"a": None})),  # type: ignore[dict-item]
    ("lone surrogate", BridgeMessage(headers={"a": "\ud800"})),
    ("non-str name", BridgeMessage(headers={5: "x"})),  # type: ignore[dict-item]
    ("bool mode", BridgeMessage(mode=True)),
]


@pytest.mark.parametrize(("what", "message"), REFUSED, ids=[w for w, _ in REFUSED])
def test_what_version_1_0_cannot_carry_is_refused_with_a_clear_error(what: str, message: BridgeMessage) -> None:
    with pytest.raises(EncodeError) as caught:
        encode(message)
    assert str(caught.value)


@pytest.mark.parametrize(("kind", "value"), [(Byte, 128), (Byte, -129), (Short, 1 << 15), (Long, 1 << 63)])
def test_typed_ints_out_of_range_are_refused(kind: type, value: int) -> None:
    with pytest.raises(EncodeError, match="does not fit"):
        kind(value)


def test_a_float_beyond_float32_is_refused() -> None:
    with pytest.raises(EncodeError):
        Float32(1e300)


@given(st.dictionaries(names, values, min_size=128, max_size=140))
@settings(deadline=None, max_examples=10, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_more_than_127_headers_are_always_refused(headers: dict[str, HeaderValue]) -> None:
    with pytest.raises(EncodeError, match="at most 127"):
        encode(BridgeMessage(headers=headers))


# ------------------------------------------------------------------------------- hostile frames
@given(messages.filter(lambda m: m.has_metadata()), st.data())
@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_every_truncation_is_a_clear_error(message: BridgeMessage, data: st.DataObject) -> None:
    frame = encode(message)
    cut = data.draw(st.integers(2, len(frame) - 1))
    with pytest.raises(DecodeError) as caught:
        decode(frame[:cut])
    assert caught.value.reason == "truncated"


@given(messages.filter(lambda m: m.has_metadata() and len(m.body) > 0), st.data())
@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_a_changed_body_byte_is_a_hash_mismatch(message: BridgeMessage, data: st.DataObject) -> None:
    frame = bytearray(encode(message))
    at = data.draw(st.integers(len(frame) - len(message.body), len(frame) - 1))
    frame[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(DecodeError) as caught:
        decode(bytes(frame))
    assert caught.value.reason == "hash_mismatch"


@given(messages.filter(lambda m: m.has_metadata()), st.data())
@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_any_corruption_decodes_or_raises_decode_error_and_nothing_else(message: BridgeMessage,
                                                                          data: st.DataObject) -> None:
    frame = bytearray(encode(message))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(2, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode(bytes(frame))
    except DecodeError as exc:
        assert exc.reason in DECODE_REASONS


@given(st.binary(max_size=300))
@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
def test_arbitrary_bytes_after_the_marker_never_crash(tail: bytes) -> None:
    try:
        decode(b"\xab\xcd\x01\x00" + tail)
    except DecodeError as exc:
        assert exc.reason in DECODE_REASONS


def _frame(headers: bytes, count: int, body: bytes = b"") -> bytes:
    return b"\xab\xcd\x01\x00" + bytes([count]) + headers + struct.pack(">ii", len(body), body_hash(body)) + body


@pytest.mark.parametrize(("reason", "data"), [
    ("truncated", b"\xab\xcd"),
    ("truncated", b"\xab\xcd\x01"),
    ("unsupported_version", b"\xab\xcd\x01\x01\x00"),
    ("unsupported_version", b"\xab\xcd\x02\x00\x00"),
    ("truncated", b"\xab\xcd\x01\x00\xff"),                                   # 255 headers announced, none there
    ("bad_type", _frame(b"\x01a\x8d", 1)),                                    # -115: a reserved type
    ("bad_type", _frame(b"\x01a\x80", 1)),                                    # -128
    ("bad_name", _frame(b"\x8f\x01", 1)),                                     # -113 is no name code
    ("bad_name", _frame(b"\x01a\x01\x01a\x02", 2)),                           # a name twice
    ("bad_utf8", _frame(b"\x01a\x92\x02\xc3\x28", 1)),
    ("bad_utf8", _frame(b"\x02\xff\xfe\x01", 1)),
    ("bad_length", b"\xab\xcd\x01\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"),
    ("truncated", b"\xab\xcd\x01\x00\x00\x7f\xff\xff\xff\x00\x00\x00\x00"),  # a 2 GiB body announced
    ("truncated", b"\xab\xcd\x01\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00"),  # 1.0.4 zero-fills this one
    ("hash_mismatch", b"\xab\xcd\x01\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00hi"),
    ("trailing_bytes", _frame(b"", 0, b"hi") + b"!"),
    ("bad_common_header", _frame(b"\x81\x92\x01x", 1)),                       # BRIDGE_timestamp as a string
    ("bad_common_header", _frame(b"\x82\x92\x01x", 1)),                       # BRIDGE_mode as a string
    ("bad_common_header", _frame(b"\x85\x8e\x01", 1)),                        # BRIDGE_priority as a Byte
])
def test_corrupt_frames_are_refused_with_their_reason(reason: str, data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data)
    assert caught.value.reason == reason


def test_what_the_reference_encoder_writes_beyond_its_own_decoder_is_read() -> None:
    # 200 headers: 1.0.4 writes the count byte 0xC8, which its own decoder reads as -56.
    headers = b"".join(bytes([len(f"h{i}")]) + f"h{i}".encode() + b"\x01" for i in range(200))
    assert len(decode(_frame(headers, 200)).headers) == 200
    # a 200-character ASCII string: 1.0.4 writes TYPE_SHORT_STRING with the length byte 0xC8
    assert decode(_frame(b"\x01a\x92\xc8" + b"x" * 200, 1)).headers == {"a": "x" * 200}
    # an empty string value: 1.0.4 writes length 0 and refuses it on reading
    assert decode(_frame(b"\x01a\x92\x00", 1)).headers == {"a": ""}


def test_the_common_header_codes_are_the_references() -> None:
    assert COMMON_HEADERS == {
        "BRIDGE_deliveryTime": -128, "BRIDGE_timestamp": -127, "BRIDGE_mode": -126, "BRIDGE_expirationTime": -125,
        "BRIDGE_type": -124, "BRIDGE_priority": -123, "BRIDGE_redelivered": -122, "BRIDGE_correlation_id": -121,
        "ENV": -120, "H1": -119, "H2": -118, "H3": -116, "H4": -115, "ENVIRONMENT": -114}


@given(st.text(max_size=20), st.integers(0xD800, 0xDFFF).map(chr), st.text(max_size=20))
@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
def test_surrogates_are_refused_not_mangled(before: str, surrogate: str, after: str) -> None:
    text = before + surrogate + after
    for message in (BridgeMessage(correlation_id=text), BridgeMessage(headers={"a": text}),
                    BridgeMessage(headers={text: 1})):
        with pytest.raises(EncodeError):
            encode(message)
