"""Retention deletes only rows that are journaled, acknowledged by every group, and old enough,
in a real node process with the retention service on."""

from __future__ import annotations

import time
from pathlib import Path

import requests

from broker.store.journal import JournalStore
from broker.store.sql import Store
from tests.support import NodeProcess, stored_messages, wait_until

HOUR_MS = 3_600_000


def _publish(url: str, topic: str, partitions: int, old: int, young: int) -> None:
    requests.put(f"{url}/v1/topics/{topic}", json={"partitions": partitions}, timeout=10).raise_for_status()
    now = int(time.time() * 1000)
    batch = [{"id": f"{topic}-{i}", "key": f"k{i}", "body": {"i": i}, "timestamp": now - 2 * HOUR_MS}
             for i in range(old)]
    batch += [{"id": f"{topic}-{old + i}", "key": f"y{i}", "body": {"i": old + i}} for i in range(young)]
    response = requests.post(f"{url}/v1/topics/{topic}/messages", json={"messages": batch}, timeout=30)
    assert response.status_code == 201, response.text


def _remaining(store: Store, topic: str) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {}
    for row in stored_messages(store, topic):
        found.setdefault(row.partition, set()).add(row.offset)
    return found


def _offsets_by_age(store: Store, topic: str) -> dict[int, tuple[set[int], set[int]]]:
    """Per partition: (offsets of old messages, offsets of young ones)."""
    cutoff = int(time.time() * 1000) - HOUR_MS
    result: dict[int, tuple[set[int], set[int]]] = {}
    for row in stored_messages(store, topic):
        result.setdefault(row.partition, (set(), set()))[0 if row.timestamp < cutoff else 1].add(row.offset)
    return result


def test_retention_keeps_unjournaled_unconsumed_and_young_messages(tmp_path: Path) -> None:
    env = {"TOYMB_RETENTION_MS": str(HOUR_MS), "TOYMB_RETENTION_INTERVAL_MS": "200",
           "TOYMB_RETENTION_BATCH": "7"}
    with NodeProcess(tmp_path / "node", env=env) as node:
        url = node.url
        for topic in ("acked", "pending", "nogroup", "unjournaled"):
            _publish(url, topic, 2, old=40, young=10)
        store = Store(f"sqlite:///{tmp_path / 'node' / 'toymb.db'}")
        before = {t: _offsets_by_age(store, t) for t in ("acked", "pending", "nogroup", "unjournaled")}
        size = {p: len(o | y) for p, (o, y) in before["acked"].items()}
        assert min(size.values()) >= 8, size
        # Partition 0: the group is behind the journal; partition 1: the journal is behind the group.
        acked = {"acked": {0: size[0] // 3, 1: size[1] // 2}, "pending": {0: 0, 1: 0}}
        journaled = {"acked": {0: 2 * size[0] // 3, 1: size[1] // 4}, "pending": {0: 50, 1: 50},
                     "nogroup": {0: 1000, 1: 12}, "unjournaled": {}}
        # A group that acknowledged part of "acked" (through the real API), and one on "pending"
        # that has acknowledged nothing yet.
        for topic, group in (("acked", "billing"), ("pending", "audit")):
            answer = requests.post(f"{url}/v1/topics/{topic}/groups/{group}/subscribers",
                                   json={"mode": "pull", "start": "earliest"}, timeout=10)
            assert answer.status_code == 201, answer.text
            if topic == "acked":
                sid = answer.json()["subscriber_id"]
                commit = requests.post(f"{url}/v1/topics/acked/groups/billing/offsets",
                                       json={"subscriber": sid, "offsets": {str(p): n - 1 for p, n
                                                                            in acked["acked"].items()}},
                                       timeout=10)
                assert commit.status_code == 200, commit.text
        # What the journal job records after committing batches to the table.
        JournalStore.of(store).record_journaled({(t, p): n for t, parts in journaled.items()
                                                 for p, n in parts.items()})

        def expected(topic: str) -> dict[int, set[int]]:
            keep: dict[int, set[int]] = {}
            for p, (old, young) in before[topic].items():
                limit = min(journaled[topic].get(p, 0), acked.get(topic, {}).get(p, 1 << 60))
                kept = {o for o in old if o >= limit} | young
                if kept:
                    keep[p] = kept
            return keep

        wanted = {t: expected(t) for t in before}
        assert wanted["acked"] != {p: o | y for p, (o, y) in before["acked"].items()}, "nothing to delete?"
        wait_until(lambda: all(_remaining(store, t) == wanted[t] for t in wanted), timeout=30,
                   what="retention to delete what it may")
        time.sleep(1.5)   # several more rounds: nothing else goes
        for topic, keep in wanted.items():
            assert _remaining(store, topic) == keep, topic
        # Young messages survive even when journaled and consumed; unjournaled ones are all there.
        assert _remaining(store, "unjournaled") == {p: o | y for p, (o, y) in before["unjournaled"].items()}
        assert _remaining(store, "pending") == {p: o | y for p, (o, y) in before["pending"].items()}
        metrics = requests.get(f"{url}/metrics", timeout=10).text
        deleted = sum(len(o | y) for t in before for o, y in before[t].values()) - sum(
            len(s) for t in wanted for s in wanted[t].values())
        assert f"toymb_retention_deleted_total {float(deleted)}" in metrics
        # Reading past the deleted rows still works for a group.
        assert JournalStore.of(store).journaled_offsets()
        store.dispose()
