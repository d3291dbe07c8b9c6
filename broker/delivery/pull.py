"""Pull delivery: long-poll fetch across a subscriber's partitions, explicit commits, redelivery.

A fetch starts each partition at the group's committed offset, or after what this subscriber
already fetched and has not committed yet (its *in-flight* position), so a second fetch returns
new messages. It returns at most ``fetch_max_bytes`` of messages (at least one): what is past
that is neither returned nor in flight, so the next fetch starts there. The in-flight position
is forgotten, and the uncommitted messages are fetched again, when ``redelivery_ms`` passes
without the subscriber committing progress, or when the partition moves to another subscriber.
It is only a cache: losing it (a restart, a new owner) just redelivers from the committed offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import BadRequest, BrokerError, Conflict
from ..store import GroupRepository

if TYPE_CHECKING:
    from ..config import Settings
    from ..longpoll import LongPolls
    from ..metrics import Metrics
    from ..store import MessageStore
    from .deadletter import DeadLetters

log = logging.getLogger(__name__)

# A waiting fetch looks again at least this often: its assignment may have changed meanwhile.
_RECHECK_S = 1.0


@dataclass
class InFlight:
    subscriber: str
    next: int
    deadline: float


class Fetcher:
    """Serves fetches and commits of pull subscribers for the topics this node owns."""

    def __init__(self, settings: Settings, groups: GroupRepository, store: MessageStore, metrics: Metrics,
                 long_polls: LongPolls, dead_letters: DeadLetters) -> None:
        self.groups = groups
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.dead_letters = dead_letters
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, str, int], InFlight] = {}
        # (topic, group, partition) -> (its committed head offset, how often that was fetched)
        self._head_fetches: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._cond = threading.Condition()
        self._versions: dict[str, int] = {}
        self._long_polls = long_polls  # shared with the fetches this node forwards

    def on_commit(self, topic: str, partitions: set[int]) -> None:
        """Appender listener: wake the fetches waiting on ``topic``."""
        with self._cond:
            self._versions[topic] = self._versions.get(topic, 0) + 1
            self._cond.notify_all()

    def fetch(self, topic: str, group: str, sid: str, limit: int, wait_ms: int) -> list[Any]:
        """Up to ``limit`` rows for ``sid``, waiting up to ``wait_ms`` for the first one."""
        deadline = time.monotonic() + wait_ms / 1000.0
        waiting = False
        try:
            while True:
                with self._cond:
                    version = self._versions.get(topic, 0)
                rows = self._fetch_once(topic, group, sid, limit)
                remaining = deadline - time.monotonic()
                if rows or remaining <= 0:
                    return rows
                if not waiting:
                    if not self._long_polls.try_hold():
                        return rows  # too many long polls already: answer now, the client polls again
                    waiting = True
                with self._cond:
                    if self._versions.get(topic, 0) == version:
                        self._cond.wait(timeout=min(remaining, _RECHECK_S))
        finally:
            if waiting:
                self._long_polls.release()

    def _fetch_once(self, topic: str, group: str, sid: str, limit: int) -> list[Any]:
        parts = self.groups.partitions_of(sid)
        if not parts:
            return []
        committed = self.groups.committed(topic, group)
        now = time.monotonic()
        starts: dict[int, int] = {}
        with self._lock:
            for p in parts:
                base = committed.get(p, 0)
                flight = self._inflight.get((topic, group, p))
                if (flight is not None and flight.subscriber == sid and flight.next > base
                        and now < flight.deadline):
                    starts[p] = flight.next
                else:
                    self._inflight.pop((topic, group, p), None)
                    starts[p] = base
            heads = {p: base for p, base in starts.items() if base == committed.get(p, 0)}
            worn = []
            for p, base in heads.items():
                seen = self._head_fetches.get((topic, group, p))
                if seen is not None and seen[0] == base and seen[1] >= self.settings.pull_max_deliveries:
                    worn.append(p)
        for p in worn:
            if self._dead_letter_head(topic, group, sid, p, heads[p]):
                starts[p] = heads[p] + 1
        rows = self.groups.read(topic, starts, limit, self.store.end_offsets(topic),
                                max_bytes=self.settings.fetch_max_bytes)
        last: dict[int, int] = {}
        for row in rows:
            last[row.partition] = max(last.get(row.partition, -1), row.offset)
        with self._lock:
            for row in rows:
                if heads.get(row.partition) == row.offset:  # the head goes out (again): count it
                    key = (topic, group, row.partition)
                    seen_offset, count = self._head_fetches.get(key, (row.offset, 0))
                    self._head_fetches[key] = (row.offset, count + 1 if seen_offset == row.offset else 1)
            for p, offset in last.items():
                key = (topic, group, p)
                flight = self._inflight.get(key)
                if flight is not None and flight.subscriber == sid:
                    flight.next = max(flight.next, offset + 1)
                else:  # the redelivery clock starts at the first uncommitted fetch
                    deadline = now + self.settings.redelivery_ms / 1000.0
                    self._inflight[key] = InFlight(sid, offset + 1, deadline)
        return rows

    def _dead_letter_head(self, topic: str, group: str, sid: str, partition: int, offset: int) -> bool:
        """Dead-letter the head message fetched too often and commit past it; False if that failed."""
        attempts = self._head_fetches[(topic, group, partition)][1]
        found = self.groups.read(topic, {partition: offset}, 1)
        if not found or found[0].offset != offset:
            return False  # gone (retention): the read starts at the next existing row anyway
        try:
            self.dead_letters.send(topic, group, sid, found[0],
                        f"fetched {attempts} times without a commit (pull_max_deliveries)", attempts)
        except (BrokerError, OSError) as exc:
            log.warning("dead-lettering %s/%d offset %d failed: %s", topic, partition, offset, exc)
            return False  # deliver it again rather than skip it
        self.groups.commit(topic, group, {partition: offset + 1})
        self.metrics.dead_letters.labels(topic, group).inc()
        log.warning("dead-lettered %s partition %d offset %d for group %s after %d fetches without a commit",
                    topic, partition, offset, group, attempts)
        with self._lock:
            self._head_fetches.pop((topic, group, partition), None)
        return True

    def commit(self, topic: str, group: str, sid: str, offsets: dict[int, int]) -> int:
        """Acknowledge up to and including ``offsets`` (partition -> offset); returns messages acknowledged.

        Raises:
            Conflict: a partition is not assigned to ``sid`` (it moved; its messages will be redelivered).
            BadRequest: an offset is past the partition's end.
        """
        owned = set(self.groups.partitions_of(sid))
        foreign = sorted(p for p in offsets if p not in owned)
        if foreign:
            raise Conflict(f"partitions {foreign} are not assigned to subscriber {sid!r}",
                           code="not_assigned", partitions=foreign, assigned=sorted(owned))
        ends = self.store.end_offsets(topic)
        beyond = sorted(p for p, o in offsets.items() if o >= ends.get(p, 0))
        if beyond:
            raise BadRequest(f"offsets of partitions {beyond} are past the end of the partition",
                             code="bad_offset", partitions=beyond)
        acknowledged = self.groups.commit(topic, group, {p: o + 1 for p, o in offsets.items()})
        if acknowledged:
            self.metrics.deliveries.labels(topic, group, "pull").inc(acknowledged)
        now = time.monotonic()
        with self._lock:
            for p, o in offsets.items():
                key = (topic, group, p)
                self._head_fetches.pop(key, None)  # its head moved on
                flight = self._inflight.get(key)
                if flight is None:
                    continue
                if flight.next <= o + 1:
                    del self._inflight[key]
                else:  # progress: the rest gets a fresh redelivery period
                    flight.deadline = now + self.settings.redelivery_ms / 1000.0
        return acknowledged

    def acknowledge_fetched(self, topic: str, group: str, sid: str) -> int:
        """Commit everything ``sid`` fetched so far (ToyMB's poll: the next poll acks the previous one)."""
        owned = set(self.groups.partitions_of(sid))
        with self._lock:
            upto = {p: f.next - 1 for (t, g, p), f in self._inflight.items()
                    if t == topic and g == group and f.subscriber == sid and p in owned}
        return self.commit(topic, group, sid, upto) if upto else 0
