"""One contract for the cluster's tables (``ClusterRepository``), run on memory, SQLite and PostgreSQL.

Times are the database's clock (memory's is this process's): a node is alive while its last
heartbeat is within the lease of a read.
"""

from __future__ import annotations

import time

from broker.store import Repositories
from broker.store.cluster import LastBeat

LEASE_MS = 60_000


def _ms() -> int:
    return int(time.time() * 1000)


def test_a_heartbeat_inserts_then_updates_and_a_registering_one_reads_the_previous_row(
        repos: Repositories) -> None:
    cluster = repos.cluster
    before = _ms()
    first = cluster.beat("n1", "one", "http://a", 111, register=True)
    assert first.outcome == "inserted" and first.previous is None
    # The database's clock, which on this machine is near this process's one.
    assert abs(first.now_ms - before) < 10_000

    again = cluster.beat("n1", "one", "http://a", 999, register=False)
    assert again.outcome == "updated" and again.previous is None and again.now_ms >= first.now_ms
    (row,) = cluster.read_nodes(LEASE_MS, 10).rows
    assert (row.id, row.name, row.url, row.started_ms, row.heartbeat_ms) == ("n1", "one", "http://a", 111,
                                                                             again.now_ms)

    moved = cluster.beat("n1", "uno", "http://b", 222, register=True)
    assert moved.outcome == "updated" and moved.previous == LastBeat("http://a", again.now_ms)
    table = cluster.read_nodes(LEASE_MS, 10)
    (row,) = table.rows
    assert (row.name, row.url, row.started_ms, row.alive) == ("uno", "http://b", 222, True)
    assert table.now_ms >= moved.now_ms


def test_alive_by_lease_mark_gone_and_latest_first(repos: Repositories) -> None:
    cluster = repos.cluster
    cluster.beat("old", "old", "http://old", 1, register=True)
    time.sleep(1.2)
    cluster.beat("new", "new", "http://new", 2, register=True)
    # First, while "new" beat just now: a lease of 1 s leaves a loaded machine 1 s for this read
    # ("new" read dead past a 150 ms lease, seen on MariaDB), and "old" beat 1.2 s ago.
    assert [(r.id, r.alive) for r in cluster.read_nodes(1000, 10).rows] == [("new", True), ("old", False)], \
        "a node is alive while its last heartbeat is within the lease"
    table = cluster.read_nodes(LEASE_MS, 10)
    assert [(r.id, r.alive) for r in table.rows] == [("new", True), ("old", True)]
    assert [r.id for r in cluster.read_nodes(LEASE_MS, 1).rows] == ["new"]

    cluster.mark_gone("new")
    assert [(r.id, r.alive, r.heartbeat_ms > 0) for r in cluster.read_nodes(LEASE_MS, 10).rows] == [
        ("old", True, True), ("new", False, False)], "a node gone is dead at once, and last"
    cluster.mark_gone("nobody")   # no row: nothing happens
    assert len(cluster.read_nodes(LEASE_MS, 10).rows) == 2


def test_topic_names_in_name_order(repos: Repositories) -> None:
    for name in ("b", "c", "a"):
        repos.messages.ensure_topic(name, 1)
    assert repos.cluster.topic_names(10) == ["a", "b", "c"]
    assert repos.cluster.topic_names(2) == ["a", "b"]
