"""The in-memory twin of the SQL message store, for tests and for trying the writer out.

``memory://<name>`` names one store per process: opening the same URL again finds the same data
(as a SQLite file would), and :meth:`MemoryStore.dispose` keeps it. It keeps the contract of
:class:`~broker.store.protocols.MessageStore`: a transaction's writes are seen by others only
once it committed, and one transaction runs at a time (the store's single writer lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..envelope import MessageRow
from .sql import Topic, TopicClaim

SCHEME = "memory://"


class MemoryRow(NamedTuple):
    """A stored message, with the attributes of :class:`~broker.envelope.MessageRow`."""

    topic: str
    partition: int
    offset: int
    id: str
    key: str | None
    headers: str
    content_type: str
    body: bytes
    timestamp: int


@dataclass
class _Data:
    topics: dict[str, Topic] = field(default_factory=dict)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    rows: dict[tuple[str, int], list[MemoryRow]] = field(default_factory=dict)
    ids: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)


_STORES: dict[str, _Data] = {}
_STORES_LOCK = threading.Lock()


class MemoryAppendTx:
    """Writes buffered until the transaction commits; the store's lock is held throughout."""

    def __init__(self, data: _Data) -> None:
        self._data = data
        self._claims: dict[str, Topic] = {}
        self._rows: list[MemoryRow] = []
        self._ends: dict[tuple[str, int], int] = {}

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

    def write(self, rows: list[tuple[Any, ...]], ends: dict[tuple[str, int], int]) -> None:
        # The column order of Store.row: topic, partition, offset, id, key, headers, type, body, ts.
        self._rows.extend(MemoryRow(*row) for row in rows)
        self._ends.update(ends)

    def commit(self) -> None:
        data = self._data
        data.topics.update(self._claims)
        for row in self._rows:
            data.rows.setdefault((row.topic, row.partition), []).append(row)
            data.ids.setdefault((row.topic, row.id), (row.partition, row.offset))
        data.ends.update(self._ends)


class MemoryStore:
    """Topics, partitions and message rows in this process's memory."""

    def __init__(self, url: str) -> None:
        if not url.startswith(SCHEME):
            raise ValueError(f"a memory store URL is {SCHEME}<name>, not {url!r}")
        self.url = url
        with _STORES_LOCK:
            self._data = _STORES.setdefault(url, _Data())

    @property
    def dialect(self) -> str:
        return "memory"

    def create_schema(self) -> None:
        """Nothing to create."""

    def ping(self) -> bool:
        return True

    def dispose(self) -> None:
        """Nothing to release; the data stays for the next store opened on the same URL."""

    def get_topic(self, name: str) -> Topic | None:
        with self._data.lock:
            return self._data.topics.get(name)

    def list_topics(self) -> list[Topic]:
        with self._data.lock:
            return sorted(self._data.topics.values(), key=lambda t: t.name)

    def ensure_topic(self, name: str, partition_count: int) -> tuple[Topic, bool]:
        """The topic, created with ``partition_count`` partitions if missing; and whether it was created."""
        with self._data.lock:
            existing = self._data.topics.get(name)
            if existing is not None:
                return existing, False
            topic = Topic(name, partition_count, None, 0)
            self._data.topics[name] = topic
            for p in range(partition_count):
                self._data.ends[(name, p)] = 0
            return topic, True

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Next offset to be written, per partition."""
        with self._data.lock:
            found = self._data.topics.get(topic)
            if found is None:
                return {}
            return {p: self._data.ends[(topic, p)] for p in range(found.partitions)}

    @contextmanager
    def append_transaction(self) -> Iterator[MemoryAppendTx]:
        """One write transaction: committed when the block ends without an exception."""
        with self._data.lock:
            txn = MemoryAppendTx(self._data)
            yield txn
            txn.commit()

    def read_range(self, topic: str, partition: int, start: int, limit: int,
                   end: int | None = None) -> list[MessageRow]:
        """Messages of ``topic``/``partition`` from offset ``start``, at most ``limit``, before ``end``."""
        with self._data.lock:
            rows = self._data.rows.get((topic, partition), [])
            # Offsets are dense from 0, so a row's index is its offset.
            stop = len(rows) if end is None else min(len(rows), end)
            return list(rows[start:min(stop, start + limit)])

    def count_messages(self, topic: str | None = None) -> int:
        with self._data.lock:
            return sum(len(rows) for (t, _), rows in self._data.rows.items() if topic is None or t == topic)
