"""A node killed with pushes in flight resumes delivery from the committed offsets after a restart."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.store import open_store
from broker.store.groups import group_tables
from tests.delivery.support import FAST_ENV, Heartbeat, Receiver, first_seen_in_order
from tests.support import NodeProcess, wait_until


def _committed_at_rest(data_dir: Path, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets in a stopped node's SQLite store: where a restart resumes."""
    store = open_store(f"sqlite:///{data_dir / 'toymb.db'}")
    try:
        return group_tables(store).committed(topic, group)
    finally:
        store.dispose()


@pytest.mark.slow
def test_sigkill_with_pushes_in_flight_then_restart(tmp_path: Path) -> None:
    in_flight = threading.Semaphore(0)

    def slow(_payload: dict[str, Any]) -> int:
        in_flight.release()
        time.sleep(0.1)  # keep a push open so the kill lands while one is unacknowledged
        return 200

    receiver = Receiver(slow)
    env = {**FAST_ENV, "TOYMB_PUSH_BATCH": "20"}
    node = NodeProcess(tmp_path / "node", env=env).start()
    beat: Heartbeat | None = None
    try:
        sub = requests.post(f"{node.url}/v1/topics/crash/groups/g/subscribers",
                            json={"mode": "push", "url": receiver.url, "id": "survivor"}, timeout=10)
        assert sub.status_code == 201, sub.text
        beat = Heartbeat(node.url, "survivor")
        sent: list[dict[str, Any]] = []
        for batch in range(3):
            resp = requests.post(f"{node.url}/v1/topics/crash/messages", timeout=30, json={"messages": [
                {"id": f"c{batch}-{i}", "key": f"k{i % 13}", "body": i} for i in range(200)]})
            assert resp.status_code == 201, resp.text
            sent.extend(resp.json()["messages"])
        wait_until(lambda: len(receiver.messages()) >= 100, timeout=30, what="some deliveries")
        assert in_flight.acquire(timeout=10)
        node.kill()
        # The pushes the receiver was answering at the kill end (answered 200 to nobody).
        wait_until(lambda: len(receiver.requests) == len(receiver.acked), timeout=10, what="pushes answered")
        before = receiver.messages()
        assert len(before) < len(sent), "the kill came before everything was delivered"
        committed = _committed_at_rest(tmp_path / "node", "crash", "g")
        beat.stop()

        node = NodeProcess(tmp_path / "node", env=env).start()
        beat = Heartbeat(node.url, "survivor")
        want = {s["id"] for s in sent}
        wait_until(lambda: {e["id"] for e in receiver.messages()} >= want, timeout=60, interval=0.2,
                   what="every message delivered after the restart")
        got = receiver.messages()
        assert first_seen_in_order(got), "in order per partition"
        # Resumed from the committed offsets, exactly: what the restarted node pushed again as a first
        # attempt is what had arrived at or past them. Acknowledged pushes reach SQL a moment later
        # (broker/delivery/offsets.py), and up to TOYMB_PUSH_IN_FLIGHT pushes were open, so how many
        # that is depends on when the kill landed; which messages they are does not. A push the
        # restarted node saw time out under load is sent again with delivery_attempt 2: that is its
        # own at-least-once retry, labelled as such, not the resume under test.
        past = {e["id"] for e in before if e["offset"] >= committed.get(e["partition"], 0)}
        after = got[len(before):]
        assert got[:len(before)] == before
        resumed = Counter(e["id"] for e in after if e["delivery_attempt"] == 1)
        assert max(resumed.values()) == 1, "a first attempt twice after the restart"
        assert {e["id"] for e in before} & set(resumed) == past, (committed, len(past))
        assert all(e["id"] in resumed for e in after if e["delivery_attempt"] > 1), "a retry of nothing sent"
        state = requests.get(f"{node.url}/v1/topics/crash/groups/g", timeout=10).json()
        wait_until(lambda: requests.get(f"{node.url}/v1/topics/crash/groups/g", timeout=10)
                   .json()["total_lag"] == 0, timeout=20, what="lag 0")
        assert [s["id"] for s in state["subscribers"]] == ["survivor"]
    finally:
        if beat is not None:
            beat.stop()
        node.stop()
        receiver.stop()
