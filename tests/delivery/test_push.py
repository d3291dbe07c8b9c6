"""Push delivery to real HTTP receivers: groups, assignment, failover, retries, dead letters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.delivery.support import Heartbeat, LiveNode, Receiver, first_seen_in_order
from tests.support import wait_until


def messages(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "key": f"k{i % 37}", "body": {"i": i}} for i in range(n)]


def ids(envelopes: list[dict[str, Any]]) -> set[str]:
    return {e["id"] for e in envelopes}


def test_two_groups_each_receive_every_message(steady: LiveNode, receivers: list[Receiver]) -> None:
    a, b = Receiver(), Receiver()
    receivers += [a, b]
    steady.subscribe("orders", "billing", mode="push", url=a.url)
    steady.subscribe("orders", "shipping", mode="push", url=b.url)
    sent = steady.publish("orders", messages(300))
    want = {s["id"] for s in sent}
    wait_until(lambda: ids(a.messages()) >= want and ids(b.messages()) >= want, timeout=30,
               what="both groups received everything")
    for receiver in (a, b):
        got = receiver.messages()
        assert first_seen_in_order(got)
        assert all(e["topic"] == "orders" and "body" in e for e in got)
    for group in ("billing", "shipping"):
        wait_until(lambda g=group: steady.group("orders", g)["total_lag"] == 0, timeout=10, what="lag 0")


def test_four_subscribers_split_the_partitions(steady: LiveNode, receivers: list[Receiver]) -> None:
    subs = []
    for _ in range(4):
        r = Receiver()
        receivers.append(r)
        subs.append((r, steady.subscribe("split", "g", mode="push", url=r.url)))
    state = steady.group("split", "g")
    holders = state["assignment"]
    assert sorted(int(p) for p in holders) == list(range(100)), "every partition is held"
    counts = {s["id"]: len(s["partitions"]) for s in state["subscribers"]}
    assert sorted(counts.values()) == [25, 25, 25, 25]
    owned = [set(s["partitions"]) for s in state["subscribers"]]
    assert sum(len(o) for o in owned) == len(set().union(*owned)) == 100, "no partition is shared"

    sent = steady.publish("split", messages(400))
    wait_until(lambda: sum(len(r.messages()) for r, _ in subs) >= 400, timeout=30, what="all delivered")
    seen: set[str] = set()
    for receiver, sub in subs:
        got = receiver.messages()
        assert {e["partition"] for e in got} <= set(holders_of(holders, sub["subscriber_id"]))
        assert first_seen_in_order(got)
        seen |= ids(got)
    assert seen == {s["id"] for s in sent}


def holders_of(assignment: dict[str, str], sid: str) -> list[int]:
    return [int(p) for p, s in assignment.items() if s == sid]


# Survivors must keep their partitions, so their leases and pushes must not lapse merely because
# a loaded CI machine delayed a heartbeat or an answer past the 2 s of ``live`` (seen once in CI:
# a survivor lost its lease too). The victim still loses its lease within a few of these periods.
SURVIVOR_SAFE = {"subscriber_lease_ms": 6000, "push_timeout_ms": 10_000}


def test_killing_a_subscriber_moves_its_partitions_without_loss(tmp_path: Path,
                                                               receivers: list[Receiver]) -> None:
    live = LiveNode(tmp_path, **SURVIVOR_SAFE)
    try:
        _kill_one_of_three(live, receivers)
    finally:
        live.close()


def _kill_one_of_three(live: LiveNode, receivers: list[Receiver]) -> None:
    rs = [Receiver() for _ in range(3)]
    receivers += rs
    subs = [live.subscribe("fail", "g", mode="push", url=r.url)["subscriber_id"] for r in rs]
    beats = [Heartbeat(live.url, sid) for sid in subs]
    try:
        first = live.publish("fail", messages(150, "a"))
        wait_until(lambda: sum(len(r.messages()) for r in rs) >= 150, timeout=30, what="first batch")
        victim_partitions = holders_of(live.group("fail", "g")["assignment"], subs[0])
        assert victim_partitions
        beats[0].stop()
        rs[0].stop()
        second = live.publish("fail", messages(300, "b"))
        # Within a few lease periods (6 s each) the victim's partitions belong to the survivors.
        wait_until(lambda: subs[0] not in live.group("fail", "g")["assignment"].values(), timeout=40,
                   what="partitions moved")
        want = {s["id"] for s in first + second}
        wait_until(lambda: ids(rs[1].messages()) | ids(rs[2].messages()) | ids(rs[0].messages()) >= want,
                   timeout=30, what="every message delivered")
        state = live.group("fail", "g")
        assert sorted(int(p) for p in state["assignment"]) == list(range(100))
        assert set(state["assignment"].values()) == set(subs[1:])
        moved = [e for r in rs[1:] for e in r.messages() if e["partition"] in victim_partitions]
        assert moved, "the survivors received messages of the victim's partitions"
        for r in rs[1:]:
            assert first_seen_in_order(r.messages())
        dlq = live.get("/v1/topics/fail.dlq")
        assert dlq.status_code == 404 or sum(dlq.json()["end_offsets"].values()) == 0, "nothing dead-lettered"
    finally:
        for beat in beats:
            beat.stop()


def test_a_receiver_failing_twice_gets_the_message_on_the_third_attempt_in_order(
        steady: LiveNode, receivers: list[Receiver]) -> None:
    seen: dict[str, int] = {}

    def flaky(payload: dict[str, Any]) -> int:
        """Fail every message's first two attempts: answer 2xx only once each was tried twice before."""
        batch = [m["id"] for m in payload["messages"]]
        for msg_id in batch:
            seen[msg_id] = seen.get(msg_id, 0) + 1
        return 200 if all(seen[i] >= 3 for i in batch) else 503

    r = Receiver(flaky)
    receivers.append(r)
    steady.subscribe("flaky", "g", mode="push", url=r.url)
    sent = steady.publish("flaky", [{"id": f"f{i}", "key": "same", "body": i} for i in range(5)])
    wait_until(lambda: len(r.messages()) >= 5, timeout=30, what="all five acknowledged")
    got = r.messages()
    assert [e["id"] for e in got] == [f"f{i}" for i in range(5)], "acknowledged once each, in order"
    assert [e["offset"] for e in got] == [s["offset"] for s in sent]
    assert seen == {f"f{i}": 3 for i in range(5)}, "acknowledged on the third attempt, never pushed again"
    metrics = steady.get("/metrics").text
    assert 'toymb_push_retries_total{group="g",topic="flaky"}' in metrics
    assert steady.get("/v1/topics/flaky.dlq").status_code == 404


def test_a_receiver_that_always_fails_sends_messages_to_the_dead_letter_topic(
        steady: LiveNode, receivers: list[Receiver]) -> None:
    r = Receiver(lambda _payload: 500)
    receivers.append(r)
    steady.subscribe("poison", "g", mode="push", url=r.url)
    sent = steady.publish("poison", [{"id": f"p{i}", "key": "one", "headers": {"h": "v"}, "body": {"n": i}}
                                   for i in range(2)])
    dead = steady.subscribe("poison.dlq", "inspect", mode="pull", start="earliest")

    def dead_letters() -> list[dict[str, Any]]:
        resp = steady.get("/v1/topics/poison.dlq/groups/inspect/messages",
                        params={"subscriber": dead["subscriber_id"], "max": 10})
        return list(resp.json()["messages"])

    got: list[dict[str, Any]] = []

    def collected() -> bool:
        got.extend(dead_letters())
        return len(got) >= 2

    wait_until(collected, timeout=30, what="two dead letters")
    assert [e["body"] for e in got] == [{"n": 0}, {"n": 1}], "dead-lettered in order, bodies intact"
    first = got[0]
    assert first["id"] == "g:p0"
    assert first["key"] == "one"
    assert first["headers"]["h"] == "v"
    assert first["headers"]["toymb.dlq.reason"] == "http 500"
    assert first["headers"]["toymb.dlq.attempts"] == "3"
    assert first["headers"]["toymb.dlq.group"] == "g"
    assert first["headers"]["toymb.dlq.source.partition"] == str(sent[0]["partition"])
    assert first["headers"]["toymb.dlq.source.offset"] == str(sent[0]["offset"])
    assert len([e for e in r.attempts() if e["id"] == "p0"]) == 3
    wait_until(lambda: steady.group("poison", "g")["total_lag"] == 0, timeout=10, what="partition moved on")
    assert 'toymb_dead_letters_total{group="g",topic="poison"} 2.0' in steady.get("/metrics").text


def test_a_subscriber_that_keeps_failing_loses_its_lease_and_its_partitions(
        live: LiveNode, receivers: list[Receiver]) -> None:
    bad, good = Receiver(lambda _payload: 500), Receiver()
    receivers += [bad, good]
    bad_id = live.subscribe("keeps", "g", mode="push", url=bad.url, id="bad")["subscriber_id"]
    live.subscribe("keeps", "g", mode="push", url=good.url, id="good")
    beats = [Heartbeat(live.url, "bad"), Heartbeat(live.url, "good")]
    try:
        bad_partitions = set(holders_of(live.group("keeps", "g")["assignment"], bad_id))
        sent = live.publish("keeps", messages(60, "x"))
        to_bad = [s for s in sent if s["partition"] in bad_partitions]
        assert len(to_bad) > 3
        # push_fail_limit (3) dead letters in a row, then its lease is revoked and the rest moves.
        wait_until(lambda: set(live.group("keeps", "g")["assignment"].values()) == {"good"}, timeout=20,
                   what="the failing subscriber's partitions moved")
        beat = live.post("/v1/subscribers/bad/heartbeat")
        assert beat.status_code == 409 and beat.json()["error"] == "lease_revoked", "heartbeats cannot revive it"

        def dlq_total() -> int:
            return sum(live.get("/v1/topics/keeps.dlq").json()["end_offsets"].values())

        wait_until(lambda: len(ids(good.messages())) + dlq_total() >= len(sent), timeout=20,
                   what="every message delivered or dead-lettered")
        assert dlq_total() == 3
        assert ids(good.messages()) | {s["id"] for s in to_bad} == {s["id"] for s in sent}
        state = live.group("keeps", "g")
        assert [s["revoked"] for s in state["subscribers"]] == [True, False]
        again = live.subscribe("keeps", "g", mode="push", url=good.url, id="bad")
        assert again["partitions"], "registering again brings it back"
    finally:
        for b in beats:
            b.stop()
