"""Pull done fully: nack redelivers at once, extend holds redelivery back, both only on one's own partitions."""

from __future__ import annotations

import time
from typing import Any

from tests.broker.conftest import key_for
from tests.delivery.support import LiveNode


def _fetch(node: LiveNode, sid: str, wait_ms: int = 0) -> list[dict[str, Any]]:
    resp = node.get("/v1/topics/lease/groups/g/messages", params={"subscriber": sid, "wait_ms": wait_ms})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def test_extend_holds_back_redelivery_and_nack_gives_back_in_order(steady: LiveNode) -> None:
    assert steady.http.put(f"{steady.url}/v1/topics/lease", json={"partitions": 2}).status_code in (200, 201)
    sid = steady.subscribe("lease", "g", mode="pull", start="earliest")["subscriber_id"]
    steady.publish("lease", [{"id": f"a{i}", "key": key_for(0, 2), "body": i} for i in range(3)]
                   + [{"id": "b0", "key": key_for(1, 2), "body": 0}])
    first = _fetch(steady, sid, 2000)
    assert [m["id"] for m in first] == ["a0", "a1", "a2", "b0"]
    extended = steady.post("/v1/topics/lease/groups/g/extend", {
        "subscriber": sid, "messages": [{"partition": 0, "offset": 0}], "extend_ms": 60_000})
    assert extended.status_code == 200 and extended.json()["extended"] == [0]
    time.sleep(2.0)  # past the node's redelivery period (1.5 s)
    again = _fetch(steady, sid)
    assert [(m["id"], m["delivery_attempt"]) for m in again] == [("b0", 2)], \
        "the extended partition is not redelivered; the other one is"

    rewound = steady.post("/v1/topics/lease/groups/g/nack", {"subscriber": sid, "messages": [
        {"partition": 0, "offset": 2}, {"partition": 0, "offset": 1}]})
    assert rewound.json()["rewound"] == [0]
    back = _fetch(steady, sid)
    assert [(m["id"], m["delivery_attempt"]) for m in back] == [("a1", 2), ("a2", 2)], \
        "a nack gives back from the lowest offset named, in order, at once"
    assert steady.post("/v1/topics/lease/groups/g/offsets", {"subscriber": sid, "offsets": {"0": 2, "1": 0}}) \
        .json()["acknowledged"] == 4
    assert _fetch(steady, sid) == []


def test_nack_and_extend_refuse_partitions_held_by_another_subscriber(steady: LiveNode) -> None:
    assert steady.http.put(f"{steady.url}/v1/topics/lease", json={"partitions": 2}).status_code in (200, 201)
    a = steady.subscribe("lease", "g", mode="pull", start="earliest")
    b = steady.subscribe("lease", "g", mode="pull", start="earliest")
    held_by_b = steady.group("lease", "g")["subscribers"][[s["id"] for s in steady.group("lease", "g")[
        "subscribers"]].index(b["subscriber_id"])]["partitions"]
    assert held_by_b
    for path, extra in (("nack", {}), ("extend", {"extend_ms": 1000})):
        resp = steady.post(f"/v1/topics/lease/groups/g/{path}", {
            "subscriber": a["subscriber_id"], "messages": [{"partition": held_by_b[0], "offset": 0}], **extra})
        assert resp.status_code == 409 and resp.json()["error"] == "not_assigned", resp.text
    for bad in ({"messages": []}, {"messages": [{"partition": 5, "offset": 0}]},
                {"messages": [{"partition": 0}]}, {"messages": [{"partition": 0, "offset": -1}]},
                {"messages": "all"}, {"messages": [{"partition": 0, "offset": 0}], "extend_ms": 10**9},
                {"messages": [{"partition": 0, "offset": 0}], "extra": 1}):
        resp = steady.post("/v1/topics/lease/groups/g/extend", {"subscriber": a["subscriber_id"], **bad})
        assert resp.status_code == 400, (bad, resp.text)
    pushed = steady.post("/v1/topics/lease/groups/g/nack", {"subscriber": "nobody",
                                                           "messages": [{"partition": 0, "offset": 0}]})
    assert pushed.status_code == 404
