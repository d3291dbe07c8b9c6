"""The in-memory twin of the SQL message store, for tests and for a node that runs alone.

``memory://<name>`` names one database per process (:class:`MemoryData`, one dict per table):
opening the same URL again finds the same data (as a SQLite file would), and
:meth:`MemoryStore.dispose` keeps it. The twins of the other repositories
(``memory_groups.py``, ``memory_cluster.py``, ``memory_journal.py``) work on the same
:class:`MemoryData`, so they see each other's rows as the SQL repositories see each other's tables.
It keeps the contract of :class:`~broker.store.protocols.MessageStore`: a transaction's writes are
seen by others only once it committed, and one transaction runs at a time (the database's lock,
which every read and write of every twin takes).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..envelope import MessageRow
from .append import message_row
from .group_tables import StoredRow, Subscriber
from .records import GivenId, Topic, TopicClaim

SCHEME = "memory://"


class MemoryNode(NamedTuple):
    """A registered node (``toymb_nodes``)."""

    name: str
    url: str
    heartbeat_ms: int
    started_ms: int


def _offset(row: StoredRow) -> int:
    return row.offset


@dataclass
class MemoryData:
    """The tables of one in-memory database; hold :attr:`lock` to read or write any of them."""

    topics: dict[str, Topic] = field(default_factory=dict)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    # Per (topic, partition), in offset order; retention may leave gaps.
    rows: dict[tuple[str, int], list[StoredRow]] = field(default_factory=dict)
    ids: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    subscribers: dict[str, Subscriber] = field(default_factory=dict)
    # Per (topic, group): partition -> subscriber id, and partition -> next offset.
    assignments: dict[tuple[str, str], dict[int, str]] = field(default_factory=dict)
    group_offsets: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    # Per (topic, group): scope -> options JSON (toymb_delivery_options).
    delivery_options: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    nodes: dict[str, MemoryNode] = field(default_factory=dict)
    journaled: dict[tuple[str, int], int] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def rows_between(self, topic: str, partition: int, start: int, end: int | None = None,
                     limit: int | None = None) -> list[StoredRow]:
        """The rows of ``topic``/``partition`` with ``start <= offset < end``, at most ``limit``."""
        rows = self.rows.get((topic, partition), [])
        low = bisect_left(rows, start, key=_offset)
        high = len(rows) if end is None else bisect_left(rows, end, lo=low, key=_offset)
        if limit is not None:
            high = min(high, low + limit)
        return rows[low:high]


_STORES: dict[str, MemoryData] = {}
_STORES_LOCK = threading.Lock()


class MemoryAppendTx:
    """Writes buffered until the transaction commits; the store's lock is held throughout."""

    def __init__(self, data: MemoryData) -> None:
        self._data = data
        self._claims: dict[str, Topic] = {}
        self._rows: list[StoredRow] = []
        self._ends: dict[tuple[str, int], int] = {}
        self._given_ids: list[GivenId] = []

    def lock_topics(self, names: Sequence[str], lock_timeout_ms: int) -> None:
        pass  # one writer in one process: nothing to lock

    def lock_topic(self, topic: str, lock_timeout_ms: int) -> TopicClaim | None:
        found = self._claims.get(topic) or self._data.topics.get(topic)
        return None if found is None else TopicClaim(found.owner, found.epoch)

    def claim_topic(self, topic: str, owner: str, seen: TopicClaim) -> bool:
        current = self._claims.get(topic) or self._data.topics.get(topic)
        if current is None or current.epoch != seen.epoch:
            return False
        self._claims[topic] = Topic(current.name, current.partitions, owner, seen.epoch + 1)
        return True

    def end_offsets(self, topic: str) -> dict[int, int]:
        found = self._data.topics.get(topic)
        if found is None:
            return {}
        return {p: self._ends.get((topic, p), self._data.ends[(topic, p)]) for p in range(found.partitions)}

    def existing_ids(self, topic: str, ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        known = self._data.ids
        return {i: known[(topic, i)] for i in ids if (topic, i) in known}

    row = staticmethod(message_row)

    def write(self, rows: list[tuple[Any, ...]], ends: dict[tuple[str, int], int],
              given_ids: list[GivenId]) -> None:
        # The column order of message_row: topic, partition, offset, id, key, headers, type, body, ts.
        self._rows.extend(StoredRow(*row) for row in rows)
        self._ends.update(ends)
        self._given_ids.extend(given_ids)

    def commit(self) -> None:
        data = self._data
        data.topics.update(self._claims)
        for row in self._rows:
            data.rows.setdefault((row.topic, row.partition), []).append(row)
        for topic, msg_id, partition, offset in self._given_ids:
            data.ids.setdefault((topic, msg_id), (partition, offset))
        data.ends.update(self._ends)


class MemoryStore:
    """Topics, partitions and message rows in this process's memory."""

    def __init__(self, url: str) -> None:
        if not url.startswith(SCHEME):
            raise ValueError(f"a memory store URL is {SCHEME}<name>, not {url!r}")
        self.url = url
        with _STORES_LOCK:
            self.data = _STORES.setdefault(url, MemoryData())

    @property
    def dialect(self) -> str:
        return "memory"

    def create_schema(self) -> None:
        """Nothing to create."""

    def ping(self) -> bool:
        return True

    def dispose(self) -> None:
        """Nothing to release; the data stays for the next store opened on the same URL."""

    def maintain(self) -> None:
        """Nothing to tidy between commits."""

    def get_topic(self, name: str) -> Topic | None:
        with self.data.lock:
            return self.data.topics.get(name)

    def list_topics(self) -> list[Topic]:
        with self.data.lock:
            return sorted(self.data.topics.values(), key=lambda t: t.name)

    def ensure_topic(self, name: str, partition_count: int) -> tuple[Topic, bool]:
        """The topic, created with ``partition_count`` partitions if missing; and whether it was created."""
        with self.data.lock:
            existing = self.data.topics.get(name)
            if existing is not None:
                return existing, False
            topic = Topic(name, partition_count, None, 0)
            self.data.topics[name] = topic
            for p in range(partition_count):
                self.data.ends[(name, p)] = 0
            return topic, True

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Next offset to be written, per partition."""
        with self.data.lock:
            found = self.data.topics.get(topic)
            if found is None:
                return {}
            return {p: self.data.ends[(topic, p)] for p in range(found.partitions)}

    @contextmanager
    def append_transaction(self) -> Iterator[MemoryAppendTx]:
        """One write transaction: committed when the block ends without an exception."""
        with self.data.lock:
            txn = MemoryAppendTx(self.data)
            yield txn
            txn.commit()

    def read_range(self, topic: str, partition: int, start: int, limit: int,
                   end: int | None = None) -> list[MessageRow]:
        """Messages of ``topic``/``partition`` from offset ``start``, at most ``limit``, before ``end``."""
        with self.data.lock:
            return list(self.data.rows_between(topic, partition, start, end, limit))

    def count_messages(self, topic: str | None = None) -> int:
        with self.data.lock:
            return sum(len(rows) for (t, _), rows in self.data.rows.items() if topic is None or t == topic)
