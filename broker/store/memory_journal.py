"""The journal's and retention's repository in memory: the twin of :class:`~broker.store.journal.JournalStore`.

It works on the :class:`~broker.store.memory.MemoryData` of a :class:`MemoryStore`, so range reads
see the message rows, retention's limits see the groups' offsets and subscribers, and its deletes
are seen by every reader. The journal job itself runs in other processes and cannot use it (it
refuses a ``memory://`` URL); a node's retention can, and so can tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .group_tables import StoredRow
from .journal import PAGE_ROWS, Range, pages, retention_limits
from .memory import MemoryData, MemoryStore


def _journal_row(row: StoredRow) -> tuple[Any, ...]:
    # In the order of broker.store.journal.ROW_COLUMNS.
    return (row.id, row.topic, row.partition, row.offset, row.key, row.headers, row.timestamp,
            row.content_type, row.body)


class MemoryJournalStore:
    """End offsets, message ranges, journaled offsets and retention's limits and deletes, in memory."""

    def __init__(self, store: MemoryStore) -> None:
        self.url = store.url
        self._data: MemoryData = store.data

    @property
    def dialect(self) -> str:
        return "memory"

    def dispose(self) -> None:
        """Nothing to release: the data belongs to the ``memory://`` name."""

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to be written, per (topic, partition) of every topic."""
        with self._data.lock:
            return dict(self._data.ends)

    def read_ranges(self, ranges: Sequence[Range], page_rows: int = PAGE_ROWS) -> Iterator[list[tuple[Any, ...]]]:
        """The message rows of ``ranges`` in offset order, a page of at most ``page_rows`` at a time
        (see :meth:`JournalStore.read_ranges`); empty pages are skipped."""
        for topic, partition, lo, hi in pages(ranges, page_rows):
            with self._data.lock:
                rows = [_journal_row(r) for r in self._data.rows_between(topic, partition, lo, hi)]
            if rows:
                yield rows

    def journaled_offsets(self) -> dict[tuple[str, int], int]:
        """How far the journal has recorded each (topic, partition): one past its last journaled offset."""
        with self._data.lock:
            return dict(self._data.journaled)

    def record_journaled(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Move the journaled offsets forward to ``offsets`` ({(topic, partition): next}), never back."""
        with self._data.lock:
            journaled = self._data.journaled
            for (topic, partition), nxt in offsets.items():
                key = (topic, int(partition))
                journaled[key] = max(int(nxt), journaled.get(key, int(nxt)))

    def retention_limits(self, topic: str, partition_count: int) -> dict[int, int]:
        """Per partition of ``topic``, the first offset that must stay (see :func:`retention_limits`)."""
        with self._data.lock:
            journaled = {p: n for (t, p), n in self._data.journaled.items() if t == topic}
            committed = {g: dict(offsets) for (t, g), offsets in self._data.group_offsets.items() if t == topic}
            for subscriber in self._data.subscribers.values():
                if subscriber.topic == topic:
                    committed.setdefault(subscriber.group, {})
        return retention_limits(partition_count, journaled, committed.values())

    def lowest_offset(self, topic: str, partition: int) -> int | None:
        """The smallest offset still stored in ``topic``/``partition``, or None if it holds no row."""
        with self._data.lock:
            rows = self._data.rows.get((topic, partition))
            return rows[0].offset if rows else None

    def delete_expired(self, topic: str, partition: int, low: int, high: int, cutoff_ms: int) -> int:
        """Delete the rows of ``topic``/``partition`` with ``low <= offset < high`` and a timestamp before
        ``cutoff_ms``; returns how many were deleted."""
        with self._data.lock:
            rows = self._data.rows.get((topic, partition), [])
            doomed = {r.offset for r in self._data.rows_between(topic, partition, low, high) if r.timestamp < cutoff_ms}
            if not doomed:
                return 0
            self._data.rows[(topic, partition)] = [r for r in rows if r.offset not in doomed]
            for row in rows:
                if row.offset in doomed:
                    # The id may be published again, as in SQL once its row is gone.
                    self._data.ids.pop((topic, row.id), None)
            return len(doomed)
