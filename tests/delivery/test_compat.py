"""ToyMB-compatible consumption, with the exact bodies ToyMB's Java driver sends and expects."""

from __future__ import annotations

from typing import Any

from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until


def java_subscribe(topic: str, group: str, kind: str, port: int) -> dict[str, Any]:
    """ClientSubscribe as Jackson writes it: every field, nulls included, port as a number."""
    return {"id": None, "topicName": topic, "groupName": group, "type": kind, "ip": "127.0.0.1",
            "port": port, "requestor": None}


def java_send(topic: str, key: str, entity: str) -> dict[str, Any]:
    """ClientMessage from ToyMBTemplateImpl.send: the object serialised into ``body`` as a string."""
    return {"id": None, "topicName": topic, "key": key, "body": entity, "requestor": None}


def test_push_flow_end_to_end(live: LiveNode, receivers: list[Receiver]) -> None:
    r = Receiver()
    receivers.append(r)
    resp = live.post("/subscribe", java_subscribe("topic1", "my-group", "push", r.port))
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    sid = resp.text
    assert sid and "{" not in sid, "the id comes back as plain text"
    entities = ['{"orderId":1,"total":12.5}', '{"orderId":2,"total":3}', "plain words"]
    for entity in entities:
        sent = live.post("/sendmessage", java_send("topic1", "my-key", entity))
        assert (sent.status_code, sent.text) == (200, "ack")
    wait_until(lambda: len(r.acked) >= 3, timeout=20, what="three pushes")
    assert all(set(p) == {"topicName", "forSubscriber", "messageId", "entity"} for p in r.acked)
    assert [p["entity"] for p in r.acked] == entities, "entities arrive as sent, in order"
    assert {p["topicName"] for p in r.acked} == {"topic1"}
    assert {p["forSubscriber"] for p in r.acked} == {sid}
    message_ids = [p["messageId"] for p in r.acked]
    assert all(isinstance(i, int) for i in message_ids) and message_ids == sorted(set(message_ids))
    state = live.group("topic1", "my-group")
    assert state["subscribers"][0]["compat"] is True and len(state["subscribers"][0]["partitions"]) == 100


def test_poll_flow_end_to_end(live: LiveNode) -> None:
    resp = live.post("/subscribe", java_subscribe("topic2", "pollers", "pull", 8080))
    assert resp.status_code == 200
    sid = resp.text
    assert live.get(f"/poll/{sid}").text == "No messages right now"
    for entity in ("first", "second"):
        assert live.post("/sendmessage", java_send("topic2", "k", entity)).text == "ack"
    answers = [live.get(f"/poll/{sid}") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all(a.headers["Content-Type"].startswith("text/plain") for a in answers)
    assert [a.text for a in answers] == ["first", "second", "No messages right now"]
    # Each poll acknowledged the previous one: nothing is left for the group.
    assert live.group("topic2", "pollers")["total_lag"] == 0


def test_a_subscriber_id_given_by_the_client_is_kept(live: LiveNode) -> None:
    body = java_subscribe("topic3", "g", "pull", 8080) | {"id": "my-stable-id"}
    assert live.post("/subscribe", body).text == "my-stable-id"
    assert live.post("/subscribe", body).text == "my-stable-id"
    assert [s["id"] for s in live.group("topic3", "g")["subscribers"]] == ["my-stable-id"]


def test_bad_compat_requests_get_4xx(live: LiveNode) -> None:
    good = java_subscribe("topic4", "g", "push", 9999)
    for bad in ({**good, "port": "80"}, {**good, "port": 0}, {**good, "ip": None}, {**good, "topicName": ""},
                {**good, "groupName": None}, {**good, "ip": "10.1.2.3"}):
        resp = live.post("/subscribe", bad)
        assert 400 <= resp.status_code < 500, (bad, resp.status_code, resp.text)
        assert "error" in resp.json()
    assert live.get("/poll/unknown-id").status_code == 404
    push_id = live.post("/subscribe", good).text
    assert live.get(f"/poll/{push_id}").status_code == 409
