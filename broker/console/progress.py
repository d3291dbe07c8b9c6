"""Which partitions of which groups are stuck: behind, and not moving.

A partition of a group is *stuck* when it has lag and its committed offset has not moved for
:data:`STUCK_AFTER_MS`. The tracker remembers, per (topic, group, partition) with lag, the
committed offset it last saw, since when, and the lag then; it learns only when an overview is
built (someone looks), so it costs nothing while nobody watches. Partitions without lag are
forgotten at once, and the memory is capped at :data:`MAX_TRACKED` partitions.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

# A consumer that has not committed for this long while messages wait is shown as stuck.
STUCK_AFTER_MS = 10_000
MAX_TRACKED = 50_000

Group = tuple[str, str]
# partition -> [committed offset, since when it has been that (ms), the lag then]
_Seen = dict[int, list[int]]


class ProgressTracker:
    """Remembers the committed offsets of lagging partitions between two looks."""

    def __init__(self, stuck_after_ms: int = STUCK_AFTER_MS, max_tracked: int = MAX_TRACKED) -> None:
        self.stuck_after_ms = stuck_after_ms
        self.max_tracked = max_tracked
        self._groups: dict[Group, _Seen] = {}
        self._count = 0
        self._lock = threading.Lock()

    def observe(self, group: Group, behind: Mapping[int, tuple[int, int]], now_ms: int) -> dict[int, tuple[int, bool]]:
        """Record one look at a group's lagging partitions (partition -> (committed, end)).

        Returns, for each of them that has not moved since an earlier look, how long it has been
        idle (ms) and whether its lag grew meanwhile. Partitions not in ``behind`` are forgotten.
        """
        idle: dict[int, tuple[int, bool]] = {}
        with self._lock:
            before = self._groups.pop(group, {})
            self._count -= len(before)
            seen: _Seen = {}
            for p, (committed, end) in behind.items():
                lag = end - committed
                last = before.get(p)
                if last is not None and last[0] == committed:
                    seen[p] = last
                    idle[p] = (max(0, now_ms - last[1]), lag > last[2])
                elif self._count + len(seen) < self.max_tracked:
                    seen[p] = [committed, now_ms, lag]
            if seen:
                self._groups[group] = seen
                self._count += len(seen)
        return idle

    def is_stuck(self, idle_ms: int) -> bool:
        return idle_ms >= self.stuck_after_ms

    def forget_except(self, groups: set[Group]) -> None:
        """Drop the groups not in ``groups`` (gone, or caught up)."""
        with self._lock:
            for group in [g for g in self._groups if g not in groups]:
                self._count -= len(self._groups.pop(group))

    def __len__(self) -> int:
        return self._count
