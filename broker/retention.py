"""Retention (opt-in with ``TOYMB_RETENTION_MS``): delete rows from SQL once nobody needs them there.

A message row is deleted only when all three hold:

(a) the Parquet journal has it: ``offset < toymb_journal_offsets.next_offset`` (written by the
    journal job after the batch is committed in Parquet; no row there means nothing is journaled);
(b) every group of the topic acknowledged it: ``offset < toymb_group_offsets.next_offset`` for each
    group that has subscribers or committed offsets; a group without a committed offset for the
    partition keeps the whole partition; a topic with no group at all counts as consumed;
(c) it is older than the retention: ``timestamp < now - retention_ms``.

The Parquet journal is the permanent log (``toymb journal replay`` restores from it). Deletes run
in short transactions of at most ``retention_batch`` rows, so publishes are not held up, and each
node only cleans the topics it owns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import Counter

from .background import Worker

if TYPE_CHECKING:
    from .config import Settings
    from .metrics import Metrics
    from .store import JournalRepository, MessageStore

log = logging.getLogger(__name__)


class Retention:
    """A node service deleting journaled, acknowledged, expired rows in bounded batches."""

    def __init__(self, settings: Settings, store: MessageStore, journal: JournalRepository,
                 owns: Callable[[str], bool], metrics: Metrics) -> None:
        self.store = store
        self.journal = journal
        self.owns = owns
        self.retention_ms = settings.retention_ms
        self.interval = settings.retention_interval_ms / 1000
        self.batch = settings.retention_batch
        self._worker = Worker("toymb-retention", self._loop)
        try:
            self.deleted = Counter("toymb_retention_deleted", "Message rows deleted by retention",
                                   registry=metrics.registry)
        except ValueError:  # already registered by broker.metrics
            self.deleted = metrics.registry._names_to_collectors["toymb_retention_deleted_total"]  # type: ignore[assignment]

    def start(self) -> None:
        if not self._worker.running:
            self._worker.start()
            log.info("retention on: rows older than %d ms once journaled and acknowledged",
                     self.retention_ms)

    def stop(self) -> None:
        self._worker.stop()

    def _loop(self) -> None:
        while not self._worker.stopping.wait(self.interval):
            try:
                self.run_once()
            except Exception:
                log.exception("retention round failed")

    def run_once(self, now_ms: int | None = None) -> int:
        """One pass over the topics this node owns; returns how many rows were deleted."""
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - self.retention_ms
        total = 0
        for topic in self.store.list_topics():
            if self._worker.stopping.is_set():
                break
            if not self.owns(topic.name):
                continue
            for partition, limit in self.limits(topic.name, topic.partitions).items():
                total += self._delete(topic.name, partition, limit, cutoff)
        if total:
            self.deleted.inc(total)
            log.info("retention deleted %d rows", total)
        return total

    def limits(self, topic: str, partition_count: int) -> dict[int, int]:
        """Per partition, the first offset that must be kept because of (a) and (b)."""
        return self.journal.retention_limits(topic, partition_count)

    def _delete(self, topic: str, partition: int, limit: int, cutoff: int) -> int:
        journal = self.journal
        low = journal.lowest_offset(topic, partition)
        if low is None:
            return 0
        deleted = 0
        while low < limit and not self._worker.stopping.is_set():
            high = min(limit, low + self.batch)
            count = journal.delete_expired(topic, partition, low, high, cutoff)
            deleted += count
            if count < high - low:
                break  # reached rows still too young (the rest is younger still, mostly)
            low = high
        return deleted
