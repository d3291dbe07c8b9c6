"""Consumer groups: subscribers and their leases, the partition assignment, committed offsets.

:class:`GroupStore` holds the groups' rules, once, over the storage primitives of
:class:`~broker.store.group_tables.GroupTables` of the message store's database (SQL or memory).
Only a topic's owner changes its groups (requests for it are forwarded there), and on that node a
lock serialises rebalances, so an assignment is always computed from the rows it replaces.
Everything durable lives in the tables, so a restarted or new owner resumes from them alone.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TypeVar

from ..envelope import MessageRow, within
from ..errors import Conflict, LimitExceeded
from .group_tables import NEVER_MS, GroupTables, Positioned, Subscriber, Windows, now_ms, revoked_lease
from .memory import MemoryStore
from .memory_groups import MemoryGroupTables
from .protocols import MessageStore
from .sql import Store
from .sql_groups import SqlGroupTables

__all__ = ["NEVER_MS", "AssignPolicy", "GroupStore", "Subscriber", "now_ms", "revoked_lease"]

# The partition assignment policy: (partition count, live subscriber ids, current assignment) ->
# the new assignment. Delivery owns the policy; the store applies it inside the rebalance transaction.
AssignPolicy = Callable[[int, list[str], dict[int, str]], dict[int, str]]

_Row = TypeVar("_Row", bound=Positioned)


# A row's partition, and its place in (partition, offset) order: read in C, not by a lambda per row.
_PARTITION = attrgetter("partition")
_PLACE = attrgetter("partition", "offset")


def group_tables(store: MessageStore) -> GroupTables:
    """The group tables in the same database as ``store``."""
    if isinstance(store, MemoryStore):
        return MemoryGroupTables(store)
    if isinstance(store, Store):
        return SqlGroupTables(store)
    raise TypeError(f"no group tables for a {type(store).__name__}")


class GroupStore:
    """Subscribers, assignments and group offsets of the groups of every topic."""

    def __init__(self, store: MessageStore, assign: AssignPolicy) -> None:
        self.store = store
        self._assign = assign
        self._tables = group_tables(store)
        self.lock = threading.RLock()
        # Topics whose committed offsets changed since the lag gauge last looked.
        self._offsets_moved: set[str] = set()

    def take_offsets_moved(self) -> set[str]:
        """The topics whose committed offsets changed since the last call."""
        moved, self._offsets_moved = self._offsets_moved, set()
        return moved

    # -- subscribers --------------------------------------------------------------------------

    def get(self, sid: str) -> Subscriber | None:
        """Subscriber ``sid``, live or not; None when there is no such subscriber."""
        return self._tables.get(sid)

    def topic_of(self, sid: str) -> str | None:
        """The topic of subscriber ``sid``, or None when there is no such subscriber."""
        return self._tables.topic_of(sid)

    def members(self, topic: str, group: str) -> list[Subscriber]:
        """The group's subscribers, live or not, by id."""
        return self._tables.members(topic, group)

    def register(self, topic: str, partition_count: int, group: str, sid: str, *, mode: str,
                 url: str | None, compat: bool, lease_until_ms: int, start: str,
                 max_members: int) -> tuple[Subscriber, list[int]]:
        """Create or refresh subscriber ``sid`` and rebalance its group; returns it and its partitions.

        Raises:
            Conflict: ``sid`` belongs to another topic or group.
            LimitExceeded: the group already has ``max_members`` live subscribers.
        """
        tables = self._tables
        with self.lock:
            existing = tables.get(sid)
            if existing is not None and (existing.topic, existing.group) != (topic, group):
                raise Conflict(f"subscriber {sid!r} belongs to group {existing.group!r} "
                               f"of topic {existing.topic!r}", code="subscriber_exists")
            at = now_ms()
            live = sum(1 for m in tables.members(topic, group) if m.live(at) and m.id != sid)
            if live >= max_members:
                raise LimitExceeded(f"group {group!r} already has {live} subscribers", limit="subscribers",
                                    max=max_members)
            self._init_offsets(topic, partition_count, group, start)
            wanted = Subscriber(sid, topic, group, mode, url, compat, lease_until_ms)
            assignment = tables.join(wanted, None if existing is not None else at, now_ms(),
                                     lambda live, current: self._assign(partition_count, live, current))
            if assignment is None:
                raise Conflict(f"subscriber {sid!r} was registered concurrently; retry", code="subscriber_exists")
            # The row is what was just written (its lease changes only under this lock): no re-read.
            return wanted, sorted(p for p, s in assignment.items() if s == sid)

    def remove(self, topic: str, partition_count: int, group: str, sid: str) -> bool:
        """Delete subscriber ``sid`` of ``group`` and rebalance; False when it was not there."""
        with self.lock:
            gone = self._tables.delete_subscriber(topic, group, sid)
            if gone:
                self._tables.put_options(topic, group, sid, None)
                self.rebalance(topic, partition_count, group)
            return gone

    def renew(self, sid: str, lease_until_ms: int) -> tuple[Subscriber | None, bool]:
        """Extend the lease of ``sid``; returns it and whether it had expired (then its group rebalances)."""
        with self.lock:
            before = self._tables.get(sid)
            if before is None:
                return None, False
            if before.lease_until_ms >= lease_until_ms:  # never shorten a longer (ToyMB push) lease
                return before, False
            self._tables.set_lease(sid, lease_until_ms)
            return self._tables.get(sid), not before.live()

    def revoke(self, sid: str) -> Subscriber | None:
        """End the lease of ``sid`` for good (it keeps failing); the caller rebalances its group."""
        with self.lock:
            self._tables.set_lease(sid, revoked_lease(now_ms()))
        return self._tables.get(sid)

    def stale_groups(self, at_ms: int) -> list[tuple[str, str]]:
        """Groups where an expired or deleted subscriber still holds partitions."""
        return self._tables.stale_groups(at_ms)

    def expired_between(self, since_ms: int, at_ms: int) -> list[tuple[str, str]]:
        """Groups of subscribers whose lease ended in [since_ms, at_ms)."""
        return self._tables.expired_between(since_ms, at_ms)

    def purge(self, before_ms: int) -> int:
        """Forget subscribers whose lease ended, or that were revoked, before ``before_ms``."""
        with self.lock:
            return self._tables.purge(before_ms)

    def live_groups(self, mode: str | None = None) -> list[tuple[str, str]]:
        """(topic, group) pairs with at least one live subscriber, of ``mode`` when given."""
        return self._tables.live_groups(now_ms(), mode)

    def all_groups(self) -> list[tuple[str, str]]:
        """(topic, group) pairs with committed offsets."""
        return self._tables.all_groups()

    # -- assignment ---------------------------------------------------------------------------

    def rebalance(self, topic: str, partition_count: int, group: str) -> dict[int, str]:
        """Recompute the group's assignment over its live subscribers and store what changed."""
        with self.lock:
            return self._tables.reassign(topic, group, now_ms(),
                                         lambda live, current: self._assign(partition_count, live, current))

    def assignment(self, topic: str, group: str) -> dict[int, str]:
        """Partition -> the subscriber holding it."""
        return self._tables.assignment(topic, group)

    def partitions_of(self, sid: str) -> list[int]:
        """The partitions subscriber ``sid`` holds, in order."""
        return self._tables.partitions_of(sid)

    # -- offsets ------------------------------------------------------------------------------

    def _init_offsets(self, topic: str, partition_count: int, group: str, start: str) -> None:
        """Give a new group its starting offsets: the end of each partition (latest) or 0 (earliest)."""
        have = set(self._tables.committed(topic, group))
        if len(have) >= partition_count:
            return
        ends = self.store.end_offsets(topic) if start == "latest" else {}
        self._tables.insert_offsets(topic, group, {p: ends.get(p, 0) for p in range(partition_count)
                                                   if p not in have})
        self._offsets_moved.add(topic)

    def committed(self, topic: str, group: str) -> dict[int, int]:
        """Partition -> the group's next offset to deliver (one past the last acknowledged)."""
        return self._tables.committed(topic, group)

    def commit(self, topic: str, group: str, next_offsets: dict[int, int], *, durable: bool = True) -> int:
        """Move committed offsets forward (never back); returns how many messages were newly acknowledged.

        Not ``durable``: the commit need not wait for the disk, and a power loss may take it back;
        only for commits whose loss means delivering again (push delivery's acknowledgements).
        """
        if not next_offsets:
            return 0
        moved = self._tables.advance_offsets(topic, group, next_offsets, durable=durable)
        if moved:
            self._offsets_moved.add(topic)
        return sum(next_offsets[p] - old for p, old in moved.items())

    def lags(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Total unacknowledged messages of each (topic, group)."""
        wanted = set(pairs)
        if not wanted:
            return {}
        sums = self._tables.lag_sums(sorted({t for t, _ in wanted}))
        return {pair: max(0, n) for pair, n in sums.items() if pair in wanted}

    def lagging(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[int, tuple[int, int]]]:
        """The partitions of each (topic, group) that have lag: partition -> (committed, end), in one read."""
        wanted = set(pairs)
        if not wanted:
            return {}
        found = self._tables.lagging(sorted({t for t, _ in wanted}))
        return {pair: partitions for pair, partitions in found.items() if pair in wanted}

    def seek(self, topic: str, group: str, next_offsets: dict[int, int]) -> None:
        """Set the group's committed offsets to ``next_offsets``, back or forward (a seek)."""
        with self.lock:
            self._tables.set_offsets(topic, group, next_offsets)
        self._offsets_moved.add(topic)

    def offsets_since(self, topic: str, partitions: Iterable[int], timestamp_ms: int) -> dict[int, int]:
        """Per partition, the first stored offset whose timestamp is at least ``timestamp_ms``."""
        return self._tables.offsets_since(topic, sorted(set(partitions)), timestamp_ms)

    # -- delivery options -----------------------------------------------------------------------

    def options(self, topic: str, group: str) -> dict[str, str]:
        """Scope ("" for the group, else a subscriber id) -> its options as JSON text."""
        return self._tables.options(topic, group)

    def put_options(self, topic: str, group: str, scope: str, text: str | None) -> None:
        """Store (or with None delete) the options of one scope of a group."""
        with self.lock:
            self._tables.put_options(topic, group, scope, text)

    # -- reading ------------------------------------------------------------------------------

    def read(self, topic: str, starts: dict[int, int], limit: int,
             ends: dict[int, int] | None = None, max_bytes: int | None = None) -> list[MessageRow]:
        """Rows after ``starts`` (partition -> offset), at most ``limit``, in offset order per partition.

        Offsets are dense, so each partition is read as the window [start, start + k): one indexed
        query for all partitions that never scans a backlog. A partition whose window is empty
        although ``ends`` says rows exist (retention removed some) is read from its next offset.

        With ``max_bytes``, the rows weigh at most that much (see :func:`within`), taken first
        messages of every partition first, then second ones, and so on, so each partition gets a
        prefix. Only sizes are read for the candidates; the rows themselves are loaded just for
        what fits, so memory stays near ``max_bytes`` however large ``limit`` and the messages are.
        """
        tables = self._tables
        if max_bytes is None:
            return self._read(topic, starts, limit, ends, tables.rows)
        sized = self._read(topic, starts, limit, ends, tables.sizes)
        sized.sort(key=lambda r: (r.offset - starts.get(r.partition, 0), r.partition))
        spans: dict[int, tuple[int, int]] = {}
        for r in within(sized, lambda r: int(r.size), max_bytes):
            first, last = spans.get(r.partition, (r.offset, r.offset))
            spans[r.partition] = (min(first, r.offset), max(last, r.offset))
        rows = list(tables.rows(topic, {p: (first, last - first + 1) for p, (first, last) in spans.items()}))
        rows.sort(key=_PLACE)
        return rows

    def _read(self, topic: str, starts: dict[int, int], limit: int, ends: dict[int, int] | None,
              fetch: Callable[[str, Windows], Iterable[_Row]]) -> list[_Row]:
        if not starts or limit <= 0:
            return []
        share = max(1, limit // len(starts))
        rows = list(fetch(topic, {p: (s, share) for p, s in starts.items()}))
        got = Counter(map(_PARTITION, rows))
        budget = limit - len(rows)
        full = [p for p, n in got.items() if n == share]
        if budget > 0 and full:
            # A second pass shares the unused budget among the partitions that filled their share
            # (rounded up, so at most len(full) rows more than the limit are read and trimmed).
            extra = -(-budget // len(full))
            rows.extend(fetch(topic, {p: (starts[p] + share, extra) for p in full}))
        gaps = {p: s for p, s in starts.items() if p not in got and ends is not None and s < ends.get(p, 0)}
        if gaps:
            # Retention deleted the rows at the start: read on from the first row still stored.
            after = {p: o for p, o in self._tables.first_offsets(topic, gaps).items() if o > gaps[p]}
            if after:
                rows.extend(fetch(topic, {p: (o, share) for p, o in after.items()}))
        if len(rows) > limit:
            # Trim fairly and keep a prefix of every partition: first messages of all partitions
            # before second ones, and so on.
            rows.sort(key=lambda r: (r.offset - starts.get(r.partition, 0), r.partition))
            rows = rows[:limit]
        rows.sort(key=lambda r: (r.partition, r.offset))
        return rows
