"""Which partitions of which groups are stuck: behind, and not moving.

A partition of a group is *stuck* when it has lag and its committed offset has not moved for
:data:`STUCK_AFTER_MS`. The tracker remembers, per (topic, group, partition) with lag, the
committed offset it last saw and since when; it learns only when an overview is built (someone
looks), so it costs nothing while nobody watches. Partitions without lag are forgotten at once,
and the memory is capped at :data:`MAX_TRACKED` entries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# A consumer that has not committed for this long while messages wait is shown as stuck.
STUCK_AFTER_MS = 10_000
MAX_TRACKED = 50_000

Key = tuple[str, str, int]


@dataclass(slots=True)
class _Seen:
    committed: int
    since_ms: int
    lag: int  # the lag when the committed offset last moved


@dataclass(frozen=True)
class Progress:
    """What the tracker says about one partition of a group."""

    stuck: bool
    idle_ms: int      # how long its committed offset has not moved while it had lag
    growing: bool     # the lag is larger than when the offset last moved


class ProgressTracker:
    """Remembers the committed offsets of lagging partitions between two looks."""

    def __init__(self, stuck_after_ms: int = STUCK_AFTER_MS, max_tracked: int = MAX_TRACKED) -> None:
        self.stuck_after_ms = stuck_after_ms
        self.max_tracked = max_tracked
        self._seen: dict[Key, _Seen] = {}
        self._lock = threading.Lock()

    def observe(self, key: Key, committed: int, lag: int, now_ms: int) -> Progress:
        """Record one look at a partition; a partition without lag is forgotten."""
        with self._lock:
            if lag <= 0:
                self._seen.pop(key, None)
                return Progress(False, 0, False)
            seen = self._seen.get(key)
            if seen is None or seen.committed != committed:
                if seen is None and len(self._seen) >= self.max_tracked:
                    return Progress(False, 0, False)  # full: this one is not watched until room frees up
                self._seen[key] = _Seen(committed, now_ms, lag)
                return Progress(False, 0, False)
            idle = max(0, now_ms - seen.since_ms)
            return Progress(idle >= self.stuck_after_ms, idle, lag > seen.lag)

    def forget_except(self, keys: set[Key]) -> None:
        """Drop what is not in ``keys`` (groups or partitions that went away)."""
        with self._lock:
            for key in [k for k in self._seen if k not in keys]:
                del self._seen[key]

    def __len__(self) -> int:
        return len(self._seen)
