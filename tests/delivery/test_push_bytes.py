"""A push request body weighs at most ``push_max_bytes`` bytes, unless one message alone is larger.

The cap counts UTF-8 bytes of the whole body: a message of non-ASCII text weighs more bytes than
characters, and counted in characters a batch of them went out larger than the setting said.
"""

from __future__ import annotations

from pathlib import Path

from tests.delivery.conftest import STEADY_LEASE_MS
from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until

CAP = 2000


def test_push_bodies_stay_within_the_byte_cap_and_a_larger_message_goes_alone(tmp_path: Path) -> None:
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS, push_max_bytes=CAP)
    receiver = Receiver()
    try:
        assert node.http.put(f"{node.url}/v1/topics/t", json={"partitions": 1}, timeout=30).status_code in (200, 201)
        # 300 characters, 600 bytes of UTF-8 each: three fit under the cap counted in characters.
        small = [{"id": f"m{n}", "body": "é" * 300, "content_type": "text/plain"} for n in range(9)]
        big = {"id": "big", "body": "x" * (CAP + 500), "content_type": "text/plain"}
        node.publish("t", [*small[:4], big, *small[4:]])
        node.subscribe("t", "g", mode="push", url=receiver.url, start="earliest")
        wait_until(lambda: len(receiver.messages()) >= 10, timeout=60, what="every message pushed")
        with receiver.lock:
            bodies = [body for _headers, body in receiver.raw]
        in_order = ["m0", "m1", "m2", "m3", "big", *[f"m{n}" for n in range(4, 9)]]
        assert [m["id"] for m in receiver.messages()] == in_order
        for body, payload in zip(bodies, receiver.acked, strict=True):
            if len(payload["messages"]) > 1:
                assert len(body) <= CAP, f"a push of {len(payload['messages'])} messages weighs {len(body)} bytes"
        assert any(len(p["messages"]) > 1 for p in receiver.acked), "small messages still share a push"
        assert [len(p["messages"]) for p in receiver.acked if p["messages"][0]["id"] == "big"] == [1]
    finally:
        receiver.stop()
        node.close()
