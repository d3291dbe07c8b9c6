"""Asynchronous offset commits for push delivery.

Acknowledged pushes move a lane forward in memory at once, and their offsets reach SQL a moment
later, merged with the other lanes of the group into one transaction. A push round thus never
waits for a disk sync, and four subscribers of a group cost one commit instead of four. A crash loses at most the last
few milliseconds of commits, which only means those messages are pushed again: delivery stays at
least once. Commits only ever move offsets forward, so merging and retrying are harmless.
"""

from __future__ import annotations

import logging
import threading

from ..store.groups import GroupStore

log = logging.getLogger(__name__)

_RETRY_S = 0.5


class OffsetCommitter:
    """Merges pending (topic, group, partition) -> next offset, and writes them from one thread."""

    def __init__(self, groups: GroupStore) -> None:
        self.groups = groups
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], dict[int, int]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="toymb-offsets", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is pending, then stop."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()

    def add(self, topic: str, group: str, next_offsets: dict[int, int]) -> None:
        with self._lock:
            pending = self._pending.setdefault((topic, group), {})
            for p, n in next_offsets.items():
                if n > pending.get(p, -1):
                    pending[p] = n
        self._wake.set()

    def flush(self) -> bool:
        """Write every pending commit now; False when some could not be written (they stay pending)."""
        with self._lock:
            batch, self._pending = self._pending, {}
        failed: dict[tuple[str, str], dict[int, int]] = {}
        for (topic, group), offsets in batch.items():
            try:
                self.groups.commit(topic, group, offsets)
            except Exception as exc:  # noqa: BLE001 - keep them and retry; never lose an ack
                log.warning("committing offsets of %s/%s failed, will retry: %s", topic, group, exc)
                failed[(topic, group)] = offsets
        if failed:
            for (topic, group), offsets in failed.items():
                self.add(topic, group, offsets)
        return not failed

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
            if not self.flush():
                self._stopping.wait(_RETRY_S)
