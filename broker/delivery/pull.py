"""Pull delivery: long-poll fetch across a subscriber's partitions, explicit commits, redelivery.

A fetch starts each partition at the group's committed offset, or after what this subscriber
already fetched and has not committed yet (its *in-flight* position), so a second fetch returns
new messages. It returns at most ``fetch_max_bytes`` of messages (at least one): what is past
that is neither returned nor in flight, so the next fetch starts there. The in-flight position
is forgotten, and the uncommitted messages are fetched again, when ``redelivery_ms`` passes
without the subscriber committing progress, or when the partition moves to another subscriber.
It is only a cache: losing it (a restart, a new owner) just redelivers from the committed offsets.

A group's filter is applied here: messages it does not match are never returned, and count as
acknowledged (a run of them at the committed offset is committed at once; the others go with
the next commit past them). Each returned message's ``delivery_attempt`` counts its fetches
since it was last at rest (kept per partition for the messages in flight, bounded). ``nack``
gives messages back at once; ``extend`` moves their redelivery deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import BadRequest, BrokerError, Conflict
from ..store import GroupRepository
from .options import GroupPolicy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..config import Settings
    from ..longpoll import LongPolls
    from ..metrics import Metrics
    from ..store import MessageStore
    from .deadletter import DeadLetters

log = logging.getLogger(__name__)

# A waiting fetch looks again at least this often: its assignment may have changed meanwhile.
_RECHECK_S = 1.0
# Delivery attempts remembered per partition (the messages in flight); beyond, the oldest are forgotten.
_ATTEMPTS_PER_PARTITION = 10_000
#: The longest a message may be extended at once, as Pub/Sub's ack deadline (600 s).
MAX_EXTEND_MS = 600_000


@dataclass
class InFlight:
    subscriber: str
    next: int
    deadline: float


class Fetcher:
    """Serves fetches and commits of pull subscribers for the topics this node owns."""

    def __init__(self, settings: Settings, groups: GroupRepository, store: MessageStore, metrics: Metrics,
                 long_polls: LongPolls, dead_letters: DeadLetters,
                 policy_of: Callable[[str, str], GroupPolicy] | None = None) -> None:
        self.groups = groups
        self.policy_of = policy_of or (lambda topic, group: GroupPolicy())
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.dead_letters = dead_letters
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, str, int], InFlight] = {}
        # (topic, group, partition) -> offset -> how often it was fetched since it was last at rest
        self._attempts: dict[tuple[str, str, int], dict[int, int]] = {}
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

    def attempt_of(self, topic: str, group: str, partition: int, offset: int) -> int:
        """How many times this message was fetched since it was last at rest (1 on its first fetch)."""
        with self._lock:
            return max(1, self._attempts.get((topic, group, partition), {}).get(offset, 1))

    def _fetch_once(self, topic: str, group: str, sid: str, limit: int) -> list[Any]:
        parts = self.groups.partitions_of(sid)
        if not parts:
            return []
        policy = self.policy_of(topic, group)
        max_deliveries = policy.dead_letter.max_attempts if policy.dead_letter else self.settings.pull_max_deliveries
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
            worn = [p for p, base in heads.items()
                    if self._attempts.get((topic, group, p), {}).get(base, 0) >= max_deliveries]
        for p in worn:
            if self._dead_letter_head(topic, group, sid, p, heads[p]):
                starts[p] = heads[p] + 1
                heads[p] += 1
        read = self.groups.read(topic, starts, limit, self.store.end_offsets(topic),
                                max_bytes=self.settings.fetch_max_bytes)
        rows, skipped = self._filtered(policy, read, heads)
        if skipped:
            self.groups.commit(topic, group, skipped)
        last: dict[int, int] = {}
        for row in read:
            last[row.partition] = max(last.get(row.partition, -1), row.offset)
        with self._lock:
            for row in rows:
                counts = self._attempts.setdefault((topic, group, row.partition), {})
                counts[row.offset] = counts.get(row.offset, 0) + 1
                if len(counts) > _ATTEMPTS_PER_PARTITION:
                    del counts[min(counts)]
            for p, offset in last.items():
                key = (topic, group, p)
                flight = self._inflight.get(key)
                if flight is not None and flight.subscriber == sid:
                    flight.next = max(flight.next, offset + 1)
                else:  # the redelivery clock starts at the first uncommitted fetch
                    deadline = now + self.settings.redelivery_ms / 1000.0
                    self._inflight[key] = InFlight(sid, offset + 1, deadline)
        return rows

    @staticmethod
    def _filtered(policy: GroupPolicy, read: list[Any], heads: dict[int, int]) -> tuple[list[Any], dict[int, int]]:
        """The rows the group's filter matches, and per partition the committed offset to move to
        past a run of unmatched rows that starts at the committed head."""
        rows: list[Any] = []
        skipped: dict[int, int] = {}
        for row in read:  # in (partition, offset) order
            if policy.matches(row):
                rows.append(row)
            elif heads.get(row.partition) == row.offset:
                heads[row.partition] = skipped[row.partition] = row.offset + 1
        return rows, skipped

    def _dead_letter_head(self, topic: str, group: str, sid: str, partition: int, offset: int) -> bool:
        """Dead-letter the head message fetched too often and commit past it; False if that failed."""
        with self._lock:
            attempts = self._attempts.get((topic, group, partition), {}).get(offset, 0)
        found = self.groups.read(topic, {partition: offset}, 1)
        if not found or found[0].offset != offset:
            return False  # gone (retention): the read starts at the next existing row anyway
        try:
            self.dead_letters.send(topic, group, sid, found[0],
                                   f"fetched {attempts} times without a commit (max deliveries)", attempts)
        except (BrokerError, OSError) as exc:
            log.warning("dead-lettering %s/%d offset %d failed: %s", topic, partition, offset, exc)
            return False  # deliver it again rather than skip it
        self.groups.commit(topic, group, {partition: offset + 1})
        self.metrics.dead_letters.labels(topic, group).inc()
        log.warning("dead-lettered %s partition %d offset %d for group %s after %d fetches without a commit",
                    topic, partition, offset, group, attempts)
        with self._lock:
            self._attempts.get((topic, group, partition), {}).pop(offset, None)
        return True

    def commit(self, topic: str, group: str, sid: str, offsets: dict[int, int]) -> int:
        """Acknowledge up to and including ``offsets`` (partition -> offset); returns messages acknowledged.

        Raises:
            Conflict: a partition is not assigned to ``sid`` (it moved; its messages will be redelivered).
            BadRequest: an offset is past the partition's end.
        """
        self._check_held(sid, offsets)
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
                counts = self._attempts.get(key)
                if counts:  # acknowledged messages are at rest
                    for done in [n for n in counts if n <= o]:
                        del counts[done]
                flight = self._inflight.get(key)
                if flight is None:
                    continue
                if flight.next <= o + 1:
                    del self._inflight[key]
                else:  # progress: the rest gets a fresh redelivery period
                    flight.deadline = now + self.settings.redelivery_ms / 1000.0
        return acknowledged

    def _check_held(self, sid: str, partitions: Iterable[int]) -> None:
        owned = set(self.groups.partitions_of(sid))
        foreign = sorted(p for p in set(partitions) if p not in owned)
        if foreign:
            raise Conflict(f"partitions {foreign} are not assigned to subscriber {sid!r}",
                           code="not_assigned", partitions=foreign, assigned=sorted(owned))

    def nack(self, topic: str, group: str, sid: str, offsets: dict[int, set[int]]) -> list[int]:
        """Give messages back for redelivery now: partition -> the offsets given back.

        The next fetch returns that offset again, and what followed it in the partition (order
        is kept; the followers' fetches are not counted as attempts). Returns the partitions
        rewound (a message not in flight has nothing to give back).

        Raises:
            Conflict: a partition is not assigned to ``sid``.
        """
        self._check_held(sid, offsets)
        rewound = []
        with self._lock:
            for p, named in sorted(offsets.items()):
                offset = min(named)
                flight = self._inflight.get((topic, group, p))
                if flight is not None and flight.subscriber == sid and offset < flight.next:
                    # What followed the message is given back with it, unseen: those deliveries do
                    # not count, so their next fetch is the same attempt again.
                    counts = self._attempts.get((topic, group, p), {})
                    for later in [n for n in counts if offset < n < flight.next and n not in named]:
                        counts[later] -= 1
                        if counts[later] <= 0:
                            del counts[later]
                    flight.next = offset
                    rewound.append(p)
        self.on_commit(topic, set(rewound))  # wake a fetch waiting on the topic
        return rewound

    def extend(self, topic: str, group: str, sid: str, partitions: Iterable[int], extend_ms: int) -> list[int]:
        """Push the redelivery deadline of the in-flight messages of ``partitions`` to ``extend_ms``
        from now (never earlier than it was); returns the partitions extended.

        The deadline is kept per partition: extending one message extends those fetched with it.

        Raises:
            Conflict: a partition is not assigned to ``sid``.
        """
        wanted = sorted(set(partitions))
        self._check_held(sid, wanted)
        until = time.monotonic() + extend_ms / 1000.0
        extended = []
        with self._lock:
            for p in wanted:
                flight = self._inflight.get((topic, group, p))
                if flight is not None and flight.subscriber == sid:
                    flight.deadline = max(flight.deadline, until)
                    extended.append(p)
        return extended

    def seek(self, topic: str, group: str, partitions: Iterable[int]) -> None:
        """The group's committed offsets moved (a seek): forget what is in flight there."""
        with self._lock:
            for p in partitions:
                self._inflight.pop((topic, group, p), None)
                self._attempts.pop((topic, group, p), None)
        self.on_commit(topic, set())

    def acknowledge_fetched(self, topic: str, group: str, sid: str) -> int:
        """Commit everything ``sid`` fetched so far (ToyMB's poll: the next poll acks the previous one)."""
        owned = set(self.groups.partitions_of(sid))
        with self._lock:
            upto = {p: f.next - 1 for (t, g, p), f in self._inflight.items()
                    if t == topic and g == group and f.subscriber == sid and p in owned}
        return self.commit(topic, group, sid, upto) if upto else 0
