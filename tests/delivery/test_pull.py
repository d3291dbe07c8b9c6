"""Pull delivery: long-poll fetch, commits, redelivery, and the group's state."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.delivery.support import LiveNode
from tests.support import wait_until


def fetch(live: LiveNode, topic: str, group: str, sid: str, **params: Any) -> list[dict[str, Any]]:
    resp = live.get(f"/v1/topics/{topic}/groups/{group}/messages", params={"subscriber": sid, **params})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def commit(live: LiveNode, topic: str, group: str, sid: str, envelopes: list[dict[str, Any]]) -> Any:
    last: dict[str, int] = {}
    for e in envelopes:
        last[str(e["partition"])] = max(last.get(str(e["partition"]), -1), e["offset"])
    return live.post(f"/v1/topics/{topic}/groups/{group}/offsets", {"subscriber": sid, "offsets": last})


def test_fetch_commit_and_redelivery_after_the_timeout(live: LiveNode) -> None:
    sid = live.subscribe("jobs", "w", mode="pull")["subscriber_id"]
    live.publish("jobs", [{"id": f"j{i}", "key": "k", "body": i} for i in range(6)])
    first = fetch(live, "jobs", "w", sid, max=3)
    assert [e["id"] for e in first] == ["j0", "j1", "j2"]
    second = fetch(live, "jobs", "w", sid, max=10)
    assert [e["id"] for e in second] == ["j3", "j4", "j5"], "a second fetch returns new messages"
    assert fetch(live, "jobs", "w", sid) == []
    resp = commit(live, "jobs", "w", sid, first)
    assert resp.status_code == 200, resp.text
    assert resp.json()["acknowledged"] == 3
    # j3..j5 were fetched but not committed: after the redelivery timeout (1.5 s) they come back.
    again: list[dict[str, Any]] = []

    def redelivered() -> bool:
        again.extend(fetch(live, "jobs", "w", sid))
        return bool(again)

    wait_until(redelivered, timeout=10, interval=0.2, what="redelivery")
    assert [e["id"] for e in again] == ["j3", "j4", "j5"]
    assert commit(live, "jobs", "w", sid, again).status_code == 200
    state = live.group("jobs", "w")
    assert state["total_lag"] == 0
    assert fetch(live, "jobs", "w", sid, wait_ms=300) == []


def test_uncommitted_messages_go_to_the_new_holder_after_a_reassignment(live: LiveNode) -> None:
    a = live.subscribe("re", "w", mode="pull")["subscriber_id"]
    sent = live.publish("re", [{"id": f"r{i}", "body": i} for i in range(200)])
    got_a = fetch(live, "re", "w", a, max=1000)
    assert {e["id"] for e in got_a} == {s["id"] for s in sent}
    b = live.subscribe("re", "w", mode="pull")["subscriber_id"]
    moved = {int(p) for p, s in live.group("re", "w")["assignment"].items() if s == b}
    assert len(moved) == 50
    got_b = fetch(live, "re", "w", b, max=1000)
    assert {e["partition"] for e in got_b} <= moved
    assert {e["id"] for e in got_b} == {s["id"] for s in sent if s["partition"] in moved}
    # a may no longer commit what moved; it commits what it still holds.
    stale = commit(live, "re", "w", a, got_a)
    assert stale.status_code == 409 and stale.json()["error"] == "not_assigned"
    assert commit(live, "re", "w", a, [e for e in got_a if e["partition"] not in moved]).status_code == 200
    assert commit(live, "re", "w", b, got_b).status_code == 200
    assert live.group("re", "w")["total_lag"] == 0


def test_a_long_poll_returns_when_a_message_arrives(live: LiveNode) -> None:
    sid = live.subscribe("lp", "w", mode="pull")["subscriber_id"]
    result: list[list[dict[str, Any]]] = []
    waiter = threading.Thread(target=lambda: result.append(fetch(live, "lp", "w", sid, wait_ms=20000)))
    waiter.start()
    time.sleep(0.3)
    live.publish("lp", [{"id": "wake", "body": "up"}])
    waiter.join(timeout=25)
    assert not waiter.is_alive()
    assert [e["id"] for e in result[0]] == ["wake"]


def test_commit_is_checked(live: LiveNode) -> None:
    sid = live.subscribe("chk", "w", mode="pull")["subscriber_id"]
    live.publish("chk", [{"id": "c0", "key": "x", "body": 1}])
    (env,) = fetch(live, "chk", "w", sid)
    p = str(env["partition"])
    path = "/v1/topics/chk/groups/w/offsets"
    assert live.post(path, {"subscriber": sid, "offsets": {p: 5}}).status_code == 400, "past the end"
    assert live.post(path, {"subscriber": sid, "offsets": {"100": 0}}).status_code == 400
    assert live.post(path, {"subscriber": sid, "offsets": {p: -1}}).status_code == 400
    assert live.post(path, {"subscriber": "nobody", "offsets": {p: 0}}).status_code == 404
    assert live.post(path, {"subscriber": sid, "offsets": {p: 0}}).status_code == 200
    assert live.post(path, {"subscriber": sid, "offsets": {p: 0}}).json()["acknowledged"] == 0


def test_group_state_and_offsets_survive_a_restart(tmp_path: Path, database_url: str) -> None:
    """The same on SQLite and PostgreSQL: assignment, committed offsets and lag, kept in SQL."""
    live = LiveNode(tmp_path / "a", database_url=database_url)
    try:
        first = live.subscribe("st", "g", mode="pull", id="puller-1")
        assert first["subscriber_id"] == "puller-1" and len(first["partitions"]) == 100
        sent = live.publish("st", [{"id": f"s{i}", "key": f"k{i}", "body": i} for i in range(20)])
        got = fetch(live, "st", "g", "puller-1", max=5)
        assert commit(live, "st", "g", "puller-1", got).status_code == 200
        again = live.subscribe("st", "g", mode="pull", id="puller-1")
        assert again["partitions"] == first["partitions"], "re-registering keeps identity and partitions"
        state = live.group("st", "g")
        assert [s["id"] for s in state["subscribers"]] == ["puller-1"]
        assert state["total_lag"] == 15
        committed = {int(p): n for p, n in state["committed"].items()}
        for e in got:
            assert committed[e["partition"]] >= e["offset"] + 1
    finally:
        live.close()
    revived = LiveNode(tmp_path / "b", database_url=database_url)
    try:
        state = revived.group("st", "g")
        assert state["total_lag"] == 15, "committed offsets survive a restart"
        rest = fetch(revived, "st", "g", "puller-1", max=100)
        assert {e["id"] for e in rest} == {s["id"] for s in sent} - {e["id"] for e in got}
    finally:
        revived.close()


def test_a_message_fetched_too_often_without_a_commit_is_dead_lettered_and_the_partition_moves_on(
        tmp_path: Path) -> None:
    live = LiveNode(tmp_path, pull_max_deliveries=3)
    try:
        sid = live.subscribe("crashy", "w", mode="pull", start="earliest")["subscriber_id"]
        live.publish("crashy", [{"id": "poison", "key": "k", "body": {"n": 0}},
                                {"id": "fine-1", "key": "k", "body": {"n": 1}},
                                {"id": "other", "key": "elsewhere", "body": {"n": 2}}])
        # A consumer that crashes on "poison" every time: it never commits, so the partition comes back.
        for delivery in range(3):
            got = wait_until(lambda: fetch(live, "crashy", "w", sid, max=10), timeout=20,
                             what=f"delivery {delivery + 1}")
            assert "poison" in [e["id"] for e in got]
            if delivery == 0:  # the healthy partition is handled at once and stays handled
                assert commit(live, "crashy", "w", sid, [e for e in got if e["id"] == "other"]).status_code == 200
        after = wait_until(lambda: fetch(live, "crashy", "w", sid, max=10), timeout=20, what="the next delivery")
        assert [e["id"] for e in after] == ["fine-1"], "the poison is not delivered a fourth time"
        assert commit(live, "crashy", "w", sid, after).status_code == 200
        assert live.group("crashy", "w")["total_lag"] == 0
        dead = fetch_all(live, "crashy.dlq")
        assert [e["id"] for e in dead] == ["w:poison"]
        headers = dead[0]["headers"]
        assert headers["toymb.dlq.attempts"] == "3" and "without a commit" in headers["toymb.dlq.reason"]
        assert headers["toymb.dlq.source.offset"] == "0"
    finally:
        live.close()


def fetch_all(live: LiveNode, topic: str) -> list[dict[str, Any]]:
    sid = live.subscribe(topic, "inspect", mode="pull", start="earliest")["subscriber_id"]
    return fetch(live, topic, "inspect", sid, max=100)


def test_a_dead_letter_takes_the_publish_path_enrichers_and_metrics_included(tmp_path: Path) -> None:
    """The dead-letter topic's own enricher runs, and the dead letter is counted as a stored message."""
    live = LiveNode(tmp_path, pull_max_deliveries=1,
                    enriching_topics=("crashy.dlq=tests.delivery.test_enrichers:Upper",))
    try:
        sid = live.subscribe("crashy", "w", mode="pull", start="earliest")["subscriber_id"]
        live.publish("crashy", [{"id": "poison", "key": "k", "body": "boom", "content_type": "text/plain"}])
        def published() -> float:
            return float(live.node.metrics.registry.get_sample_value("toymb_published_messages_total") or 0)

        before = published()
        assert [e["id"] for e in fetch(live, "crashy", "w", sid, max=10)] == ["poison"]
        # Never committed: the next fetch dead-letters it (one delivery allowed) and moves on.
        def dead_lettered() -> bool:
            fetch(live, "crashy", "w", sid, max=10)
            return "crashy.dlq" in {t.name for t in live.node.store.list_topics()}

        wait_until(dead_lettered, timeout=20, what="the dead letter")
        dead = fetch_all(live, "crashy.dlq")
        assert [(e["id"], e["body"]) for e in dead] == [("w:poison", "BOOM")]
        assert dead[0]["headers"]["enriched-by"] == "upper"
        assert published() == before + 1
    finally:
        live.close()
