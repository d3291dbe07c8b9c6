"""The JMS egress sink against real ActiveMQ: bodies, header and property mapping, exactly once on replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from stomp.utils import parse_frame

from journal_spark.jms.egress import JmsSink
from journal_spark.jms.mapping import decode_name, encode_name
from journal_spark.jms.stompclient import encode_send
from journal_spark.routes import DataError
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import drain, unique, write_routes


@given(st.text(max_size=40))
def test_property_names_are_legal_and_reversible(name: str) -> None:
    encoded = encode_name(name)
    assert encoded and (encoded[0].isalpha() or encoded[0] in "_$")
    assert all(c.isascii() and (c.isalnum() or c in "_$") for c in encoded)
    assert not encoded.startswith("JMS")
    assert decode_name(encoded) == name


def test_plain_identifiers_are_unchanged() -> None:
    for name in ("color", "my_prop", "traceId", "AMQ_BRIDGE_MSG_ID_LIST"):
        assert encode_name(name) == name
    assert encode_name("trace.id") == "trace_DOT_id"
    assert encode_name("x-request-id") == "x_HYPHEN_request_HYPHEN_id"


HEADER_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
HEADER_NAMES = HEADER_TEXT.filter(lambda n: n not in ("", "content-length", "destination", "transaction"))


@given(st.dictionaries(HEADER_NAMES, HEADER_TEXT, max_size=6), st.binary(max_size=40), st.booleans())
@example({"a\\b": "c:d", "e": "f\ng\rh\\"}, b"text", False)
@example({"k": "a\\c"}, b"", False)      # raw, stomp.py would read "a:"
@example({"k": "a\rb"}, b"", False)
@example({"n": "1"}, b"bin\x00ary", False)
@example({}, b"", False)
def test_packed_send_frames_parse_back_whole(headers: dict[str, str], body: bytes, length: bool) -> None:
    """Every name and value comes back from stomp.py's parser as it went in (':', '\\n', '\\r' and
    '\\\\' escaped), and a body with a NUL gets a content-length even when none was asked for."""
    if length:
        headers = {**headers, "content-length": "999"}     # a stale length is corrected
    frame = encode_send("/queue/a:b", body, headers, "tx\n1")
    assert frame.endswith(b"\x00")
    assert b"\r" not in frame.split(b"\n\n", 1)[0]
    parsed = parse_frame(frame[:-1])
    assert parsed.cmd == "SEND" and parsed.body == body
    got = dict(parsed.headers)
    assert (got.pop("destination"), got.pop("transaction")) == ("/queue/a:b", "tx\n1")
    if length or b"\x00" in body:
        assert got.pop("content-length") == str(len(body))
    else:
        assert b"\x00" not in frame[:-1]
    headers.pop("content-length", None)
    assert got == headers


def row(i: int, topic: str = "orders", partition: int = 0, **extra: Any) -> dict[str, Any]:
    base = {"id": f"m-{i}", "topic": topic, "partition": partition, "offset": i, "key": f"k{i % 3}",
            "headers": {"n": str(i)}, "timestamp": 1_700_000_000_000 + i, "content_type": "text/plain",
            "body": f"hello {i}".encode()}
    base.update(extra)
    return base


def sink_for(
    tmp_path: Path, queue: str, bridge: str | None = None, extra: list[str] | None = None
) -> JmsSink:
    routes = write_routes(tmp_path / f"routes-{queue}.properties", [
        f"bridge.id={bridge or unique('bridge')}",
        "routes.out.predicate=msg.address==orders",
        f"routes.out.dest.jms.queue={queue}",
        *(extra or []),
    ])
    return JmsSink(load_routes(routes))


def test_text_and_bytes_bodies_and_headers(activemq: str, tmp_path: Path) -> None:
    queue = unique("egress")
    sink = sink_for(tmp_path, queue)
    binary = bytes([0, 255, 1, 2, 0, 10, 58]) + b"\r\n\x00tail"
    rows = [
        row(0, headers={"trace.id": "t-1", "x-request-id": "r 1", "jms.color": "red",
                        "jms.JMSCorrelationID": "corr-7", "jms.JMSReplyTo": "queue://replies",
                        "jms.JMSType": "order", "jms.JMSPriority": "8", "jms.JMSExpiration": "4102444800000",
                        "jms.JMSDeliveryMode": "PERSISTENT", "multi": "a:b\nc"}),
        row(1, content_type="application/octet-stream", body=binary),
        row(2, content_type="application/json", body=json.dumps({"total": 12, "name": "é"}).encode()),
        row(3, topic="elsewhere"),          # routed nowhere
    ]
    try:
        assert sink.write_rows(rows, 0) == 3
    finally:
        sink.close()
    frames = drain(f"/queue/{queue}", 3)
    assert len(frames) == 3
    text, data, js = frames
    # A TextMessage has no content-length; a BytesMessage has one and keeps every byte.
    assert "content-length" not in text.headers and text.body == b"hello 0"
    assert data.headers["content-length"] == str(len(binary)) and data.body == binary
    assert "content-length" not in js.headers and json.loads(js.body) == {"total": 12, "name": "é"}
    h = text.headers
    assert h["correlation-id"] == "corr-7"
    assert h["reply-to"] == "/queue/replies"
    assert h["type"] == "order" and h["priority"] == "8" and h["expires"] == "4102444800000"
    assert h["persistent"] == "true"
    assert h["trace_DOT_id"] == "t-1" and h["x_HYPHEN_request_HYPHEN_id"] == "r 1"
    assert h["color"] == "red" and h["multi"] == "a:b\nc"
    assert h["jmsbridge_DOT_origin"] == sink.routes.bridge_id and h["jmsbridge_DOT_hops"] == "1"
    assert h["toymb_DOT_content_type"] == "text/plain"
    assert js.headers["toymb_DOT_content_type"] == "application/json"


def test_replayed_batches_export_nothing_twice(activemq: str, tmp_path: Path) -> None:
    queue = unique("replay")
    bridge = unique("bridge")
    rows = [row(i, partition=i % 2) for i in range(50)]
    sink = sink_for(tmp_path, queue, bridge, ["jms.egress.chunk=7"])
    try:
        assert sink.write_rows(rows[:30], 0) == 30
        assert sink.write_rows(rows[:30], 0) == 0           # Spark replays batch 0
    finally:
        sink.close()
    # A new process (lost checkpoint, or a crash after the COMMIT): the marker in ActiveMQ decides.
    again = sink_for(tmp_path, queue, bridge, ["jms.egress.chunk=7"])
    try:
        assert again.write_rows(rows, 0) == 20
        assert again.write_rows(rows, 1) == 0
    finally:
        again.close()
    frames = drain(f"/queue/{queue}", 50)
    bodies = sorted(f.body.decode() for f in frames)
    assert bodies == sorted(f"hello {i}" for i in range(50))


def test_loop_prevention_and_hops(activemq: str, tmp_path: Path) -> None:
    queue = unique("loop")
    bridge = unique("bridge")
    sink = sink_for(tmp_path, queue, bridge)
    rows = [row(0, headers={"jmsbridge.origin": bridge}), row(1, headers={"jmsbridge.hops": "9"}),
            row(2, headers={"jmsbridge.origin": "other", "jmsbridge.hops": "2"})]
    try:
        assert sink.write_rows(rows, 0) == 1
    finally:
        sink.close()
    frames = drain(f"/queue/{queue}", 1)
    assert [f.body for f in frames] == [b"hello 2"]
    assert frames[0].headers["jmsbridge_DOT_hops"] == "3"


def test_a_row_refused_mid_transaction_fails_the_batch_and_sends_none_of_it(activemq: str, tmp_path: Path) -> None:
    """Rows are converted while the frames before them are written: under ``routing.on-error=fail``
    a bad row in the middle of a transaction stops the batch, and the rows already written are
    rolled back with the connection. The batch replayed without the bad row exports each once."""
    queue = unique("midfail")
    bridge = unique("bridge")
    extra = ["routes.out.conv.key=msg.header.k"]          # routing.on-error defaults to fail
    rows = [row(i, headers={"k": f"k{i}"}) for i in range(400)]
    rows[300] = row(300, headers={})                      # no key: a DataError under on-error=fail
    sink = sink_for(tmp_path, queue, bridge, extra)
    try:
        with pytest.raises(DataError, match="no msg.header.k"):
            sink.write_rows(rows, 0)
        rows[300] = row(300, headers={"k": "k300"})
        assert sink.write_rows(rows, 0) == 400               # Spark replays the batch
    finally:
        sink.close()
    bodies = [f.body.decode() for f in drain(f"/queue/{queue}", 400, idle=1.0)]
    assert sorted(bodies) == sorted(f"hello {i}" for i in range(400))
