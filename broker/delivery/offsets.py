"""Asynchronous offset commits for push delivery.

Acknowledged pushes move a lane forward in memory at once, and their offsets reach SQL a moment
later (at most one write every ``_GAP_S``), merged with the other lanes of the group into one
transaction. A push round thus never waits for a disk sync, and four subscribers of a group cost
one commit instead of four. A crash loses at most the last few tens of milliseconds of commits,
which only means those messages are pushed again: delivery stays at least once. Commits only
ever move offsets forward, so merging and retrying are harmless.

For the same reason the commits themselves do not wait for the disk (``durable=False``: on
SQLite no fsync of their own, see :meth:`broker.store.sql.Store.lazy_engine`). With a sync each,
every push round added a disk flush under SQLite's single write lock between two publishes, and
the next publish's commit waited for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..background import Worker
from ..store import GroupRepository

log = logging.getLogger(__name__)

_RETRY_S = 0.5
# After a write, the next one waits this long: acks arriving meanwhile merge into it. At 5,000
# msg/s one write per push round was ~100 transactions a second, each holding the node's GIL and
# SQLite's write lock between publishes; this bounds them at 20 a second per node.
_GAP_S = 0.05


class OffsetCommitter:
    """Merges pending (topic, group, partition) -> next offset, and writes them from one thread."""

    def __init__(self, groups: GroupRepository) -> None:
        self.groups = groups
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], dict[int, int]] = {}
        # Held while a batch is written, so forget() can wait for a write of offsets it drops.
        self._writing = threading.Lock()
        self._worker = Worker("toymb-offsets", self._run)

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        """Write what is pending, then stop."""
        self._worker.stop()
        self.flush()

    def add(self, topic: str, group: str, next_offsets: dict[int, int]) -> None:
        with self._lock:
            pending = self._pending.setdefault((topic, group), {})
            for p, n in next_offsets.items():
                if n > pending.get(p, -1):
                    pending[p] = n
        self._worker.wake.set()

    def flush(self) -> bool:
        """Write every pending commit now; False when some could not be written (they stay pending)."""
        failed: dict[tuple[str, str], dict[int, int]] = {}
        with self._writing:
            with self._lock:
                batch, self._pending = self._pending, {}
            for (topic, group), offsets in batch.items():
                try:
                    self.groups.commit(topic, group, offsets, durable=False)
                except Exception as exc:  # noqa: BLE001 - keep them and retry; never lose an ack
                    log.warning("committing offsets of %s/%s failed, will retry: %s", topic, group, exc)
                    failed[(topic, group)] = offsets
        if failed:
            for (topic, group), offsets in failed.items():
                self.add(topic, group, offsets)
        return not failed

    def forget(self, topic: str, group: str, partitions: set[int], then: Callable[[], None] | None = None) -> None:
        """Drop pending commits of these partitions (a seek replaces them), then run ``then`` (the
        seek's own write) before any other write: waits for a write in progress."""
        with self._writing:
            with self._lock:
                pending = self._pending.get((topic, group))
                for p in partitions:
                    if pending is not None:
                        pending.pop(p, None)
            if then is not None:
                then()

    def _run(self) -> None:
        while not self._worker.stopping.is_set():
            self._worker.wake.wait()
            self._worker.wake.clear()
            if not self.flush():
                self._worker.stopping.wait(_RETRY_S)
            else:
                self._worker.stopping.wait(_GAP_S)
