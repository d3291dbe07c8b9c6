"""Delivery attempts, counted from 1, and the per-group dead-letter policy."""

from __future__ import annotations

from typing import Any

from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until


def _fetch_all(node: LiveNode, topic: str, group: str, sid: str, want: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    def more() -> bool:
        resp = node.get(f"/v1/topics/{topic}/groups/{group}/messages", params={"subscriber": sid, "wait_ms": 200})
        got.extend(resp.json()["messages"])
        return len(got) >= want
    wait_until(more, timeout=30, what=f"{want} messages in {topic}")
    return got


def test_a_push_failing_twice_then_succeeding_carries_attempts_1_2_3(steady: LiveNode) -> None:
    failures = {"left": 2}

    def respond(payload: dict[str, Any]) -> int:
        if any(m["id"] == "flaky" for m in payload["messages"]) and failures["left"] > 0:
            failures["left"] -= 1
            return 500
        return 200

    receiver = Receiver(respond)
    try:
        steady.subscribe("tries", "g", mode="push", url=receiver.url,
                         dead_letter={"max_attempts": 5, "min_backoff_ms": 10, "max_backoff_ms": 40})
        steady.publish("tries", [{"id": "flaky", "key": "one", "body": "x"},
                                 {"id": "after", "key": "one", "body": "y"}])
        wait_until(lambda: {m["id"] for m in receiver.messages()} >= {"flaky", "after"}, timeout=30,
                   what="both delivered")
        seen = [m["delivery_attempt"] for m in receiver.attempts() if m["id"] == "flaky"]
        assert seen == [1, 2, 3]
        # "after" rode behind "flaky" in the first push, which failed: the receiver saw it once
        # already, so its next push says attempt 2 (a failed batch counts for all it carried).
        assert [m["delivery_attempt"] for m in receiver.attempts() if m["id"] == "after"] == [1, 2]
    finally:
        receiver.stop()


def test_after_max_attempts_the_dead_letter_carries_group_attempts_status_and_origin(steady: LiveNode) -> None:
    receiver = Receiver(lambda _payload: 503)
    try:
        steady.subscribe("doomed", "strict", mode="push", url=receiver.url,
                         dead_letter={"max_attempts": 2, "min_backoff_ms": 0, "max_backoff_ms": 0})
        sent = steady.publish("doomed", [{"id": "poison", "key": "p", "body": {"n": 1},
                                          "headers": {"origin": "test"}}])[0]
        dlq = steady.subscribe("doomed.dlq", "inspect", mode="pull", start="earliest")
        dead = _fetch_all(steady, "doomed.dlq", "inspect", dlq["subscriber_id"], 1)[0]
        headers = dead["headers"]
        assert headers["toymb.dlq.group"] == "strict"
        assert headers["toymb.dlq.attempts"] == "2"
        assert headers["toymb.dlq.last_status"] == "503" and "503" in headers["toymb.dlq.reason"]
        assert (headers["toymb.dlq.topic"], headers["toymb.dlq.source.partition"],
                headers["toymb.dlq.source.offset"], headers["toymb.dlq.source.id"]) == \
            ("doomed", str(sent["partition"]), str(sent["offset"]), "poison")
        assert headers["origin"] == "test" and dead["body"] == {"n": 1}
        assert [m["delivery_attempt"] for m in receiver.attempts()] == [1, 2], "max_attempts=2 of this group"
    finally:
        receiver.stop()
    # The policy is the group's and is fixed: another one is refused, the same one accepted.
    again = steady.post("/v1/topics/doomed/groups/strict/subscribers",
                        {"mode": "pull", "dead_letter": {"max_attempts": 3}})
    assert again.status_code == 409 and again.json()["error"] == "group_options_differ"
    for bad in ({"max_attempts": 0}, {"max_attempts": 101}, {"min_backoff_ms": 5, "max_backoff_ms": 1},
                {"unknown": 1}, [], {"max_attempts": True}):
        resp = steady.post("/v1/topics/doomed/groups/other/subscribers", {"mode": "pull", "dead_letter": bad})
        assert resp.status_code == 400, (bad, resp.text)


def test_pull_counts_attempts_and_applies_the_groups_max(steady: LiveNode) -> None:
    sub = steady.subscribe("pulled", "g", mode="pull", start="earliest", dead_letter={"max_attempts": 2})
    sid = sub["subscriber_id"]
    steady.publish("pulled", [{"id": "m", "key": "k", "body": 1}])
    url = "/v1/topics/pulled/groups/g"
    first = steady.get(f"{url}/messages", params={"subscriber": sid, "wait_ms": 2000}).json()["messages"]
    assert [m["delivery_attempt"] for m in first] == [1]
    nacked = steady.post(f"{url}/nack", {"subscriber": sid, "messages": [
        {"partition": first[0]["partition"], "offset": first[0]["offset"]}]})
    assert nacked.status_code == 200 and nacked.json()["rewound"] == [first[0]["partition"]]
    second = steady.get(f"{url}/messages", params={"subscriber": sid, "wait_ms": 0}).json()["messages"]
    assert [(m["id"], m["delivery_attempt"]) for m in second] == [("m", 2)], "nack redelivers at once"
    steady.post(f"{url}/nack", {"subscriber": sid, "messages": [
        {"partition": first[0]["partition"], "offset": first[0]["offset"]}]})
    third = steady.get(f"{url}/messages", params={"subscriber": sid, "wait_ms": 0}).json()["messages"]
    assert third == [], "after 2 attempts (the group's max) the message is dead-lettered"
    dlq = steady.subscribe("pulled.dlq", "inspect", mode="pull", start="earliest")
    dead = _fetch_all(steady, "pulled.dlq", "inspect", dlq["subscriber_id"], 1)[0]
    assert dead["headers"]["toymb.dlq.attempts"] == "2" and dead["headers"]["toymb.dlq.group"] == "g"
