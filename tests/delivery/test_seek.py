"""Seek: to a timestamp, earliest, latest or offsets; the replay is exactly the messages from there, in order."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.delivery.conftest import STEADY_LEASE_MS
from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until

T0 = 1_700_000_000_000


def batch(prefix: str, n: int, timestamp: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "key": f"k{i % 7}", "body": i, "timestamp": timestamp + i} for i in range(n)]


def replayed_in_order(envelopes: list[dict[str, Any]], stored: list[dict[str, Any]]) -> None:
    """``envelopes`` hold each of ``stored`` (and nothing else), first seen in offset order per partition."""
    assert {e["id"] for e in envelopes} == {s["id"] for s in stored}
    first: dict[int, list[int]] = {}
    for e in envelopes:
        seen = first.setdefault(e["partition"], [])
        if e["offset"] not in seen:
            seen.append(e["offset"])
    assert all(seen == sorted(seen) for seen in first.values())


def test_seek_to_a_timestamp_replays_exactly_the_later_messages_across_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="broker.delivery.api_control")
    receiver = Receiver()
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS)
    try:
        node.subscribe("replay", "g", mode="push", url=receiver.url)
        node.publish("replay", batch("old", 40, T0))
        later = node.publish("replay", batch("new", 40, T0 + 10_000))
        wait_until(lambda: len(receiver.messages()) >= 80, timeout=30, what="first delivery")
        wait_until(lambda: node.group("replay", "g")["total_lag"] == 0, timeout=10, what="all acknowledged")
        before = len(receiver.messages())

        sought = node.post("/v1/topics/replay/groups/g/seek", {"timestamp": T0 + 10_000})
        assert sought.status_code == 200, sought.text
        assert "SEEK replay/g" in caplog.text, "a seek is logged"
        node.close()  # a restart right after the seek: the replay survives it
        node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS)
        wait_until(lambda: node.group("replay", "g")["total_lag"] == 0 and len(receiver.messages()) >= before + 40,
                   timeout=30, what="the replay")
        replayed_in_order(receiver.messages()[before:], later)
    finally:
        node.close()
        receiver.stop()


def test_seek_earliest_latest_and_offsets_per_partition(steady: LiveNode) -> None:
    assert steady.http.put(f"{steady.url}/v1/topics/moves", json={"partitions": 3}).status_code in (200, 201)
    sid = steady.subscribe("moves", "g", mode="pull")["subscriber_id"]
    stored = steady.publish("moves", batch("m", 30, T0))
    url = "/v1/topics/moves/groups/g"
    ends = {str(p): sum(1 for s in stored if s["partition"] == p) for p in range(3)}

    def committed() -> dict[str, int]:
        return dict(steady.group("moves", "g")["committed"])

    assert committed() == {"0": 0, "1": 0, "2": 0}, "a pull group that joined before starts at 0"
    assert steady.post(f"{url}/seek", {"to": "latest"}).json()["offsets"] == ends
    assert committed() == ends
    assert steady.post(f"{url}/seek", {"to": "earliest", "partitions": [1]}).json()["offsets"] == {"1": 0}
    assert committed() == {**ends, "1": 0}
    fetched = steady.get(f"{url}/messages", params={"subscriber": sid, "max": 100}).json()["messages"]
    assert {m["partition"] for m in fetched} == {1} and [m["offset"] for m in fetched] == list(range(int(ends["1"])))
    assert steady.post(f"{url}/seek", {"offsets": {"0": 2, "2": 1}}).json()["offsets"] == {"0": 2, "2": 1}
    again = steady.get(f"{url}/messages", params={"subscriber": sid, "max": 100}).json()["messages"]
    assert [(m["partition"], m["offset"]) for m in again] == \
        [(0, o) for o in range(2, int(ends["0"]))] + [(2, o) for o in range(1, int(ends["2"]))], \
        "the sought partitions only; partition 1's messages are still in flight"
    later = steady.post(f"{url}/seek", {"timestamp": T0 + 25}).json()["offsets"]
    assert sum(int(ends[p]) - o for p, o in later.items()) == 5, "the 5 messages stamped T0+25 and after"
    for bad in ({}, {"to": "middle"}, {"to": "latest", "timestamp": 1}, {"timestamp": -1},
                {"offsets": {"0": 10**6}}, {"offsets": {"9": 0}}, {"to": "latest", "partitions": [3]},
                {"to": "latest", "partitions": []}, {"to": "latest", "extra": 1}, {"offsets": []}):
        resp = steady.post(f"{url}/seek", bad)
        assert resp.status_code == 400, (bad, resp.text)
    assert steady.post("/v1/topics/moves/groups/none/seek", {"to": "latest"}).status_code == 404


def test_a_seek_during_pushes_replays_from_exactly_the_sought_offset(steady: LiveNode) -> None:
    """Pushes in flight when the seek lands do not move the group past the sought offsets."""
    slow = Receiver(lambda _payload: (time.sleep(0.05), 200)[1])
    try:
        steady.subscribe("busy", "g", mode="push", url=slow.url, start="earliest")
        stored = steady.publish("busy", batch("b", 300, T0))
        wait_until(lambda: len(slow.messages()) >= 50, timeout=30, what="pushes under way")
        # Counted before the seek: the replay's first push (every partition's offset 0) may reach
        # the receiver before the seek's own answer reaches this test.
        mark = len(slow.requests)
        steady.post("/v1/topics/busy/groups/g/seek", {"to": "earliest"})
        wait_until(lambda: steady.group("busy", "g")["total_lag"] == 0, timeout=60, what="the replay")
        by_partition: dict[int, list[dict[str, Any]]] = {}
        for payload in slow.requests[mark:]:
            for m in payload["messages"]:
                by_partition.setdefault(m["partition"], []).append(m)
        # A round in flight at the seek may come first; a partition's replay starts at its last
        # offset 0 (the replay of a partition waits for that round to end).
        replay = [m for msgs in by_partition.values()
                  for m in msgs[max(i for i, m in enumerate(msgs) if m["offset"] == 0):]]
        replayed_in_order(replay, stored)
    finally:
        slow.stop()
