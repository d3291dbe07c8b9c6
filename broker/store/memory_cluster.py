"""Node registrations and heartbeats in memory: the twin of :class:`~broker.store.cluster.ClusterStore`.

The one clock every node shares is this process's (:func:`time.time`), as every node of a memory
database is in this process. Each method holds the database's lock throughout, so a heartbeat
finds, updates or inserts the row in one step and never loses an insert race (no ``"raced"``).
"""

from __future__ import annotations

import time

from .cluster import Beat, LastBeat, NodeTable, node_table
from .memory import MemoryData, MemoryNode, MemoryStore


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemoryClusterStore:
    """Node registrations and heartbeats, and topic names, in the memory of a :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self._data: MemoryData = store.data

    def beat(self, node_id: str, name: str, url: str, started_ms: int, *, register: bool) -> Beat:
        """Upsert the node's row with a heartbeat now (see :meth:`ClusterStore.beat`)."""
        with self._data.lock:
            now = _now_ms()
            found = self._data.nodes.get(node_id)
            if found is None:
                self._data.nodes[node_id] = MemoryNode(name, url, now, started_ms)
                return Beat(now, "inserted")
            previous = LastBeat(found.url, found.heartbeat_ms) if register else None
            started = started_ms if register else found.started_ms
            self._data.nodes[node_id] = MemoryNode(name, url, now, started)
            return Beat(now, "updated", previous)

    def mark_gone(self, node_id: str) -> None:
        """Set the node's heartbeat to 0, so the other nodes see it dead at once."""
        with self._data.lock:
            found = self._data.nodes.get(node_id)
            if found is not None:
                self._data.nodes[node_id] = found._replace(heartbeat_ms=0)

    def read_nodes(self, lease_ms: int, limit: int) -> NodeTable:
        """At most ``limit`` node rows, latest heartbeat first; alive if they beat within ``lease_ms``."""
        with self._data.lock:
            now = _now_ms()
            latest = sorted(self._data.nodes.items(), key=lambda item: -item[1].heartbeat_ms)[:limit]
        return node_table(now, lease_ms, ((i, n.name, n.url, n.heartbeat_ms, n.started_ms) for i, n in latest))

    def topic_names(self, limit: int) -> list[str]:
        """The names of at most ``limit`` topics, in name order."""
        with self._data.lock:
            return sorted(self._data.topics)[:limit]
