"""Push payload formats: CloudEvents 1.0 (parsed by the ``cloudevents`` SDK), binary mode, unwrapped."""

from __future__ import annotations

import base64
import json
from urllib.parse import unquote

from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat

from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until

SENT = [
    {"id": "json-1", "key": "cust é/7", "headers": {"trace": "t-1", "ünï": "ç"}, "body": {"total": 12.5}},
    {"id": "text-1", "key": "cust-8", "body": "gift wrap", "content_type": "text/plain"},
    {"id": "bin-1", "body_base64": base64.b64encode(b"\x00\x01\xff").decode()},
]


def _pushed(node: LiveNode, fmt: str) -> list[tuple[dict[str, str], bytes]]:
    receiver = Receiver()
    try:
        node.subscribe("formats", fmt, mode="push", url=receiver.url, format=fmt, start="earliest")
        wait_until(lambda: len(receiver.acked) >= len(SENT), timeout=30, what=f"{fmt} pushes")
        return list(receiver.raw)
    finally:
        receiver.stop()


def test_cloudevents_pushes_parse_with_the_sdk_in_both_modes(steady: LiveNode) -> None:
    stored = {s["id"]: s for s in steady.publish("formats", SENT)}
    for fmt in ("cloudevents", "cloudevents-binary"):
        events = [from_http(HTTPMessage(headers, data), JSONFormat()) for headers, data in _pushed(steady, fmt)]
        by_id = {e.get_id(): e for e in events}
        assert set(by_id) == set(stored), fmt
        first = by_id["json-1"]
        attrs = first.get_attributes()
        assert first.get_specversion() == "1.0" and first.get_type() == "toymb.message"
        assert first.get_source() == "/toymb/topics/formats" and first.get_subject() == "cust é/7", fmt
        data = first.get_data()
        assert (json.loads(data) if isinstance(data, bytes | str) else data) == {"total": 12.5}, fmt
        assert first.get_datacontenttype() == "application/json"
        assert int(attrs["toymbpartition"]) == stored["json-1"]["partition"]
        assert int(attrs["toymboffset"]) == stored["json-1"]["offset"]
        assert attrs["toymbattempt"] == "1" and attrs["toymbgroup"] == fmt
        assert json.loads(attrs["toymbheaders"]) == {"trace": "t-1", "ünï": "ç"}
        text = by_id["text-1"].get_data()
        assert (text.decode() if isinstance(text, bytes) else text) == "gift wrap"
        assert by_id["bin-1"].get_data() == b"\x00\x01\xff", fmt
        assert by_id["bin-1"].get_time() is not None


def test_unwrapped_pushes_carry_the_raw_body_and_metadata_headers(steady: LiveNode) -> None:
    stored = {s["id"]: s for s in steady.publish("formats", SENT)}
    pushed = _pushed(steady, "unwrapped")
    by_id = {unquote(h["toymb-id"]): (h, d) for h, d in pushed}
    headers, data = by_id["json-1"]
    assert json.loads(data) == {"total": 12.5} and headers["content-type"] == "application/json"
    assert unquote(headers["toymb-key"]) == "cust é/7"
    assert json.loads(unquote(headers["toymb-headers"])) == {"trace": "t-1", "ünï": "ç"}
    assert int(headers["toymb-offset"]) == stored["json-1"]["offset"]
    assert headers["toymb-delivery-attempt"] == "1" and headers["toymb-group"] == "unwrapped"
    assert by_id["bin-1"][1] == b"\x00\x01\xff" and "toymb-key" not in by_id["bin-1"][0]
    assert by_id["text-1"][1] == b"gift wrap"
    assert all("webhook-signature" in h for h, _ in pushed), "every format is signed"


def test_envelope_pushes_carry_json_bodies_exactly_as_values(steady: LiveNode) -> None:
    """A JSON body goes into the envelope as its stored text: big integers stay exact, spaces and
    escapes read back as the same value, and bytes that are not strict JSON come as body_base64."""
    pretty = b'{ "name" : "caf\\u00e9",\n  "list": [1, 2.50, {"deep": null}] }'
    sent = [
        {"id": "ns", "key": "a", "body": {"sent_ns": 1795000000123456789, "pad": "x"}},
        {"id": "huge", "key": "a", "body": {"n": 123456789012345678901234567890}},
        {"id": "pretty", "key": "a", "body_base64": base64.b64encode(pretty).decode(),
         "content_type": "application/json"},
        {"id": "scalar", "key": "a", "body": -12345678901234567890},
    ]
    steady.publish("exact", sent)
    receiver = Receiver()
    try:
        steady.subscribe("exact", "g", mode="push", url=receiver.url, start="earliest")
        wait_until(lambda: len(receiver.messages()) == len(sent), timeout=30, what="the pushes")
        bodies = {m["id"]: m["body"] for m in receiver.messages()}
        assert bodies == {"ns": {"sent_ns": 1795000000123456789, "pad": "x"},
                          "huge": {"n": 123456789012345678901234567890},
                          "pretty": {"name": "café", "list": [1, 2.5, {"deep": None}]},
                          "scalar": -12345678901234567890}
        assert all(m["delivery_attempt"] == 1 and m["content_type"].startswith("application/json")
                   for m in receiver.messages())
    finally:
        receiver.stop()
