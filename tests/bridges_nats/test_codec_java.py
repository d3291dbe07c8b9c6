"""The codec against the reference jar (nats-jms-bridge-message 1.0.4), both directions, a few hundred messages each."""

from __future__ import annotations

import math
import random
import struct
import subprocess
from pathlib import Path

import pytest

from nats_bridge.codec import decode, encode
from nats_bridge.protocol import BridgeMessage, Byte, Float32, HeaderValue, Long, Short, java_type

from .conftest import HERE

PROBE = HERE / "CodecProbe.java"
COUNT = 400
# One worker runs both tests, so Maven resolves the reference jar (the session's reference_classpath,
# a Maven JVM of its own) once, not once on each worker.
pytestmark = pytest.mark.xdist_group("nats-reference")


def _hex(data: bytes) -> str:
    return data.hex() or "-"


def _value(value: HeaderValue) -> str:
    kind = java_type(value)
    if isinstance(value, str):
        text = _hex(value.encode("utf-8"))
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, Float32):
        bits = 0x7FC00000 if math.isnan(value) else struct.unpack(">I", struct.pack(">f", value))[0]
        text = format(bits, "x")
    elif isinstance(value, float):
        bits = 0x7FF8000000000000 if math.isnan(value) else struct.unpack(">Q", struct.pack(">d", value))[0]
        text = format(bits, "x")
    else:
        text = str(int(value))
    return f"{kind}:{text}"


def canonical(m: BridgeMessage) -> tuple[object, ...]:
    """The fields CodecProbe.canonical prints, parsed (headers as a dict: Java's map order is arbitrary)."""
    return (m.timestamp or -1, m.expiration_time or -1, m.delivery_time or -1,
            -1 if m.mode is None else m.mode, -1 if m.priority is None else m.priority,
            "true" if m.redelivered else "false",
            _hex(m.correlation_id.encode()) if m.correlation_id else "-",
            _hex(m.type.encode()) if m.type else "-", _hex(m.body),
            {_hex(k.encode()): _value(v) for k, v in m.headers.items()})


def parse_java(fields: list[str]) -> tuple[object, ...]:
    ts, exp, dt, mode, prio, redelivered, corr, kind, body, headers = fields
    pairs = {} if headers == "-" else dict(h.split(":", 1) for h in headers.split(","))
    return (int(ts), int(exp), int(dt), int(mode), int(prio), redelivered, corr, kind, body, pairs)


def java(classpath: str, *args: str, stdin: str | None = None) -> list[str]:
    done = subprocess.run(["java", "-cp", classpath, str(PROBE), *args], input=stdin, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.timeout(400)
def test_python_decodes_what_the_reference_encodes(reference_classpath: str) -> None:
    lines = java(reference_classpath, "encode", "16", str(COUNT))
    assert len(lines) == COUNT
    framed = raw = 0
    for number, line in enumerate(lines):
        frame, *fields = line.split(" ")
        message = decode(bytes.fromhex(frame) if frame != "-" else b"")
        assert canonical(message) == parse_java(fields), f"message {number}: {line[:300]}"
        framed += message.framed
        raw += not message.framed
    assert framed > COUNT // 2 and raw > 10, (framed, raw)


_ALPHABET = "abcXYZ019-_. é中ß😀\u0416"


def _text(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(low, high)))


def _fits(text: str, limit: int) -> str:
    data = text.encode("utf-8")[:limit]
    return data.decode("utf-8", "ignore") or "x"


def python_message(rng: random.Random, number: int) -> BridgeMessage:
    """Messages including what the 1.0.4 *encoder* gets wrong (non-ASCII, 128..511-byte strings, ints -127..-110)."""
    body = rng.randbytes(rng.choice([0, 1, 2, 5, 100, 2000]))
    if number % 9 == 0:
        body = b"\xab\xcd\x01\x00" + body     # a body that looks like a frame is framed, not mistaken
    if number % 7 == 0:
        return BridgeMessage(body=body)
    headers: dict[str, HeaderValue] = {}
    for k in range(rng.choice([0, 1, 5, 20, 110])):
        name = _fits(_text(rng, 1, 60), 120) + str(k) if rng.random() > 0.1 else rng.choice(
            ["ENV", "H1", "H2", "H3", "H4", "ENVIRONMENT", ""])
        kind = rng.randrange(10)
        value: HeaderValue
        if kind == 0:
            value = _text(rng, 1, rng.choice([10, 200, 600]))
        elif kind == 1:
            value = rng.random() < 0.5
        elif kind == 2:
            value = Byte(rng.randint(-128, 127))
        elif kind == 3:
            value = Short(rng.randint(-32768, 32767))
        elif kind == 4:
            value = rng.choice([rng.randint(-128, 127), rng.randint(-(1 << 31), (1 << 31) - 1)])
        elif kind == 5:
            value = Long(rng.randint(-(1 << 63), (1 << 63) - 1))
        elif kind == 6:
            value = Float32(struct.unpack(">f", rng.randbytes(4))[0])
        elif kind == 7:
            value = struct.unpack(">d", rng.randbytes(8))[0]
        else:
            value = "x" * rng.choice([127, 128, 255, 256, 511, 512, 65535])
        headers[name] = value
    if len(headers) > 110:
        headers = dict(list(headers.items())[:110])
    return BridgeMessage(
        body=body, headers=headers,
        correlation_id=rng.choice([None, _text(rng, 1, 50), "c" * 300]),
        timestamp=rng.choice([None, rng.randint(1, 1 << 62)]),
        expiration_time=rng.choice([None, rng.randint(1, 1 << 40)]),
        delivery_time=rng.choice([None, rng.randint(1, 1 << 40)]),
        mode=rng.choice([None, 1, 2, -109, 127]), priority=rng.choice([None, 0, 4, 9]),
        type=rng.choice([None, _text(rng, 1, 30)]), redelivered=rng.random() < 0.3)


@pytest.mark.timeout(400)
def test_the_reference_decodes_what_python_encodes(reference_classpath: str, tmp_path: Path) -> None:
    rng = random.Random(3)
    messages = [python_message(rng, n) for n in range(COUNT)]
    frames = [encode(m) for m in messages]
    lines = java(reference_classpath, "decode", stdin="".join(_hex(f) + "\n" for f in frames))
    assert len(lines) == COUNT
    for number, (message, line) in enumerate(zip(messages, lines, strict=True)):
        assert parse_java(line.split(" ")) == canonical(message), f"message {number}: {message!r}"[:600]
        assert canonical(decode(frames[number])) == canonical(message)   # NaN != NaN: compare bits
