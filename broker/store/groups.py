"""Group state in SQL: subscribers and their leases, the partition assignment, committed offsets.

Only a topic's owner changes its groups (requests for it are forwarded there), and on that node a
lock serialises rebalances, so an assignment is always computed from the rows it replaces.
Everything durable lives here, so a restarted or new owner resumes from these rows alone.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, or_, select, text, update
from sqlalchemy.exc import IntegrityError

from ..envelope import MessageRow, within
from ..errors import Conflict, LimitExceeded
from .schema import assignments, group_offsets, messages, subscribers
from .schema import partitions as partition_table
from .sql import Store

# The partition assignment policy: (partition count, live subscriber ids, current assignment) ->
# the new assignment. Delivery owns the policy; the store applies it inside the rebalance transaction.
AssignPolicy = Callable[[int, list[str], dict[int, str]], dict[int, str]]

# Lease of ToyMB-compatible push subscribers: ToyMB's driver never heartbeats, so their lease ends
# only when the broker revokes it (the receiver keeps failing).
NEVER_MS = 1 << 62
# A push subscriber the broker dropped because it kept failing has the lease -(when it was revoked):
# it is in the past, heartbeats cannot renew it (registering again can), and, like an expired one,
# it is remembered for an hour after that moment.


def revoked_lease(at_ms: int) -> int:
    return -max(1, at_ms)
_OR_CHUNK = 100


_ROWS = ", ".join(f'"{c.name}"' for c in messages.columns)
# What a message weighs against a byte cap: the bytes it stores (body, headers, id, key, content
# type). Its JSON rendering is a little larger; a binary body sent as base64 is 4/3 of it.
_SIZES = ('"partition", "offset", length("body") + length("headers") + length("id") '
          '+ coalesce(length("key"), 0) + length("content_type") AS size')
@functools.lru_cache(maxsize=2 * _OR_CHUNK)
def _window_sql(terms: int, columns: str) -> Any:
    """``SELECT`` of several [start, end) offset windows. Built as text because building the same
    expression with SQLAlchemy's operators cost more than running it. The topic goes inside every
    term so that SQLite searches the primary key once per term (MULTI-INDEX OR) instead of
    scanning the whole topic."""
    conds = " OR ".join(f'("topic" = :t AND "partition" = :p{n} AND "offset" >= :s{n} AND "offset" < :e{n})'
                        for n in range(terms))
    return text(f"SELECT {columns} FROM toymb_messages WHERE {conds}")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Subscriber:
    id: str
    topic: str
    group: str
    mode: str
    url: str | None
    compat: bool
    lease_until_ms: int

    @property
    def revoked(self) -> bool:
        return self.lease_until_ms <= 0

    def live(self, at_ms: int | None = None) -> bool:
        return self.lease_until_ms >= (now_ms() if at_ms is None else at_ms)

    def to_json(self, partitions: list[int]) -> dict[str, Any]:
        lease = None if self.lease_until_ms >= NEVER_MS or self.revoked else self.lease_until_ms
        return {"id": self.id, "mode": self.mode, "url": self.url, "compat": self.compat,
                "live": self.live(), "revoked": self.revoked, "lease_until_ms": lease, "partitions": partitions}


def _subscriber(row: Any) -> Subscriber:
    return Subscriber(row.id, row.topic, row.group_name, row.mode, row.url, bool(row.compat),
                      row.lease_until_ms)


class GroupStore:
    """SQL access for subscribers, assignments and group offsets."""

    def __init__(self, store: Store, assign: AssignPolicy) -> None:
        self.store = store
        self._assign = assign
        self.engine = store.engine
        self.lock = threading.RLock()
        # Topics whose committed offsets changed since the lag gauge last looked.
        self._offsets_moved: set[str] = set()

    def take_offsets_moved(self) -> set[str]:
        """The topics whose committed offsets changed since the last call."""
        moved, self._offsets_moved = self._offsets_moved, set()
        return moved

    # -- subscribers --------------------------------------------------------------------------

    def get(self, sid: str) -> Subscriber | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(subscribers).where(subscribers.c.id == sid)).first()
        return None if row is None else _subscriber(row)

    def topic_of(self, sid: str) -> str | None:
        """The topic of subscriber ``sid``, or None when there is no such subscriber."""
        with self.engine.connect() as conn:
            topic = conn.execute(select(subscribers.c.topic).where(subscribers.c.id == sid)).scalar()
        return None if topic is None else str(topic)

    def members(self, topic: str, group: str) -> list[Subscriber]:
        query = (select(subscribers).where(subscribers.c.topic == topic, subscribers.c.group_name == group)
                 .order_by(subscribers.c.id))
        with self.engine.connect() as conn:
            return [_subscriber(r) for r in conn.execute(query)]

    def register(self, topic: str, partition_count: int, group: str, sid: str, *, mode: str,
                 url: str | None, compat: bool, lease_until_ms: int, start: str,
                 max_members: int) -> tuple[Subscriber, list[int]]:
        """Create or refresh subscriber ``sid`` and rebalance its group; returns it and its partitions.

        Raises:
            Conflict: ``sid`` belongs to another topic or group.
            LimitExceeded: the group already has ``max_members`` live subscribers.
        """
        with self.lock:
            existing = self.get(sid)
            if existing is not None and (existing.topic, existing.group) != (topic, group):
                raise Conflict(f"subscriber {sid!r} belongs to group {existing.group!r} "
                               f"of topic {existing.topic!r}", code="subscriber_exists")
            at = now_ms()
            live = sum(1 for m in self.members(topic, group) if m.live(at) and m.id != sid)
            if live >= max_members:
                raise LimitExceeded(f"group {group!r} already has {live} subscribers", limit="subscribers",
                                    max=max_members)
            self._init_offsets(topic, partition_count, group, start)
            values = {"mode": mode, "url": url, "compat": int(compat), "lease_until_ms": lease_until_ms}
            try:
                with self.engine.begin() as conn:
                    if existing is None:
                        conn.execute(subscribers.insert().values(id=sid, topic=topic, group_name=group,
                                                                 created_ms=at, **values))
                    else:
                        conn.execute(update(subscribers).where(subscribers.c.id == sid).values(**values))
            except IntegrityError:
                raise Conflict(f"subscriber {sid!r} was registered concurrently; retry",
                               code="subscriber_exists") from None
            assignment = self.rebalance(topic, partition_count, group)
            subscriber = self.get(sid)
            assert subscriber is not None
            return subscriber, sorted(p for p, s in assignment.items() if s == sid)

    def remove(self, topic: str, partition_count: int, group: str, sid: str) -> bool:
        """Delete subscriber ``sid`` of ``group`` and rebalance; False when it was not there."""
        with self.lock:
            with self.engine.begin() as conn:
                gone = conn.execute(delete(subscribers).where(
                    subscribers.c.id == sid, subscribers.c.topic == topic,
                    subscribers.c.group_name == group)).rowcount
            if gone:
                self.rebalance(topic, partition_count, group)
            return bool(gone)

    def renew(self, sid: str, lease_until_ms: int) -> tuple[Subscriber | None, bool]:
        """Extend the lease of ``sid``; returns it and whether it had expired (then its group rebalances)."""
        with self.lock:
            before = self.get(sid)
            if before is None:
                return None, False
            if before.lease_until_ms >= lease_until_ms:  # never shorten a longer (ToyMB push) lease
                return before, False
            with self.engine.begin() as conn:
                conn.execute(update(subscribers).where(subscribers.c.id == sid)
                             .values(lease_until_ms=lease_until_ms))
            return self.get(sid), not before.live()

    def revoke(self, sid: str) -> Subscriber | None:
        """End the lease of ``sid`` for good (it keeps failing); the caller rebalances its group."""
        with self.lock, self.engine.begin() as conn:
            conn.execute(update(subscribers).where(subscribers.c.id == sid)
                         .values(lease_until_ms=revoked_lease(now_ms())))
        return self.get(sid)

    def stale_groups(self, at_ms: int) -> list[tuple[str, str]]:
        """Groups where an expired or deleted subscriber still holds partitions."""
        joined = assignments.outerjoin(subscribers, subscribers.c.id == assignments.c.subscriber_id)
        query = (select(assignments.c.topic, assignments.c.group_name).distinct().select_from(joined)
                 .where(or_(subscribers.c.id.is_(None), subscribers.c.lease_until_ms < at_ms)))
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def expired_between(self, since_ms: int, at_ms: int) -> list[tuple[str, str]]:
        """Groups of subscribers whose lease ended in [since_ms, at_ms)."""
        lease = subscribers.c.lease_until_ms
        query = (select(subscribers.c.topic, subscribers.c.group_name).distinct()
                 .where(lease >= since_ms, lease < at_ms))
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def purge(self, before_ms: int) -> int:
        """Forget subscribers whose lease ended, or that were revoked, before ``before_ms``."""
        lease = subscribers.c.lease_until_ms
        ended = or_(and_(lease > 0, lease < before_ms), and_(lease <= 0, lease > -before_ms))
        with self.lock, self.engine.begin() as conn:
            result = conn.execute(delete(subscribers).where(ended))
            return int(result.rowcount)

    def live_groups(self, mode: str | None = None) -> list[tuple[str, str]]:
        """(topic, group) pairs with at least one live subscriber, of ``mode`` when given."""
        query = select(subscribers.c.topic, subscribers.c.group_name).distinct().where(
            subscribers.c.lease_until_ms >= now_ms())
        if mode is not None:
            query = query.where(subscribers.c.mode == mode)
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def all_groups(self) -> list[tuple[str, str]]:
        query = select(group_offsets.c.topic, group_offsets.c.group_name).distinct()
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    # -- assignment ---------------------------------------------------------------------------

    def rebalance(self, topic: str, partition_count: int, group: str) -> dict[int, str]:
        """Recompute the group's assignment over its live subscribers and store what changed."""
        where = (assignments.c.topic == topic, assignments.c.group_name == group)
        with self.lock, self.engine.begin() as conn:
            at = now_ms()
            live = [r[0] for r in conn.execute(select(subscribers.c.id).where(
                subscribers.c.topic == topic, subscribers.c.group_name == group,
                subscribers.c.lease_until_ms >= at))]
            current = {p: s for p, s in conn.execute(
                select(assignments.c.partition, assignments.c.subscriber_id).where(*where))}
            new = self._assign(partition_count, live, current)
            moved = [p for p, s in current.items() if new.get(p) != s]
            if moved:
                conn.execute(delete(assignments).where(*where, assignments.c.partition.in_(moved)))
            added = [{"topic": topic, "group_name": group, "partition": p, "subscriber_id": s}
                     for p, s in new.items() if current.get(p) != s]
            if added:
                conn.execute(assignments.insert(), added)
        return new

    def assignment(self, topic: str, group: str) -> dict[int, str]:
        query = select(assignments.c.partition, assignments.c.subscriber_id).where(
            assignments.c.topic == topic, assignments.c.group_name == group)
        with self.engine.connect() as conn:
            return {p: s for p, s in conn.execute(query)}

    def partitions_of(self, sid: str) -> list[int]:
        query = select(assignments.c.partition).where(assignments.c.subscriber_id == sid).order_by(
            assignments.c.partition)
        with self.engine.connect() as conn:
            return [p for (p,) in conn.execute(query)]

    # -- offsets ------------------------------------------------------------------------------

    def _init_offsets(self, topic: str, partition_count: int, group: str, start: str) -> None:
        """Give a new group its starting offsets: the end of each partition (latest) or 0 (earliest)."""
        have = set(self.committed(topic, group))
        if len(have) >= partition_count:
            return
        ends = self.store.end_offsets(topic) if start == "latest" else {}
        rows = [{"topic": topic, "group_name": group, "partition": p, "next_offset": ends.get(p, 0)}
                for p in range(partition_count) if p not in have]
        try:
            with self.engine.begin() as conn:
                conn.execute(group_offsets.insert(), rows)
        except IntegrityError:
            pass  # another registration of the same new group won the race; its offsets stand
        self._offsets_moved.add(topic)

    def committed(self, topic: str, group: str) -> dict[int, int]:
        query = select(group_offsets.c.partition, group_offsets.c.next_offset).where(
            group_offsets.c.topic == topic, group_offsets.c.group_name == group)
        with self.engine.connect() as conn:
            return {p: n for p, n in conn.execute(query)}

    def commit(self, topic: str, group: str, next_offsets: dict[int, int]) -> int:
        """Move committed offsets forward (never back); returns how many messages were newly acknowledged."""
        if not next_offsets:
            return 0
        with self.engine.begin() as conn:
            old = {p: n for p, n in conn.execute(
                select(group_offsets.c.partition, group_offsets.c.next_offset).where(
                    group_offsets.c.topic == topic, group_offsets.c.group_name == group,
                    group_offsets.c.partition.in_(list(next_offsets))))}
            rows = [{"b_p": p, "b_n": n} for p, n in next_offsets.items() if n > old.get(p, n)]
            if rows:
                conn.execute(
                    update(group_offsets)
                    .where(group_offsets.c.topic == topic, group_offsets.c.group_name == group,
                           group_offsets.c.partition == bindparam("b_p"),
                           group_offsets.c.next_offset < bindparam("b_n"))
                    .values(next_offset=bindparam("b_n")), rows)
        if rows:
            self._offsets_moved.add(topic)
        return sum(r["b_n"] - old[r["b_p"]] for r in rows)

    def lags(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Total unacknowledged messages of each (topic, group)."""
        wanted = set(pairs)
        if not wanted:
            return {}
        query = (select(group_offsets.c.topic, group_offsets.c.group_name,
                        func.sum(partition_table.c.next_offset - group_offsets.c.next_offset))
                 .select_from(group_offsets.join(partition_table, and_(
                     partition_table.c.topic == group_offsets.c.topic,
                     partition_table.c.partition == group_offsets.c.partition)))
                 .where(group_offsets.c.topic.in_(sorted({t for t, _ in wanted})))
                 .group_by(group_offsets.c.topic, group_offsets.c.group_name))
        with self.engine.connect() as conn:
            return {(t, g): max(0, int(n or 0)) for t, g, n in conn.execute(query) if (t, g) in wanted}

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
        if max_bytes is None:
            return self._read(topic, starts, limit, ends, _ROWS)
        sized = self._read(topic, starts, limit, ends, _SIZES)
        sized.sort(key=lambda r: (r.offset - starts.get(r.partition, 0), r.partition))
        spans: dict[int, tuple[int, int]] = {}
        for r in within(sized, lambda r: int(r.size), max_bytes):
            first, last = spans.get(r.partition, (r.offset, r.offset))
            spans[r.partition] = (min(first, r.offset), max(last, r.offset))
        rows = self._windows(topic, {p: (first, last - first + 1) for p, (first, last) in spans.items()}, _ROWS)
        rows.sort(key=lambda r: (r.partition, r.offset))
        return rows

    def _read(self, topic: str, starts: dict[int, int], limit: int, ends: dict[int, int] | None,
              columns: str) -> list[Any]:
        if not starts or limit <= 0:
            return []
        share = max(1, limit // len(starts))
        rows = self._windows(topic, {p: (s, share) for p, s in starts.items()}, columns)
        got: dict[int, int] = {}
        for row in rows:
            got[row.partition] = got.get(row.partition, 0) + 1
        budget = limit - len(rows)
        if budget > 0:  # a second pass gives the unused budget to partitions that filled their share
            more = {p: (starts[p] + share, budget) for p, n in got.items() if n == share}
            rows.extend(self._windows(topic, more, columns))
        gaps = [p for p in starts if p not in got and ends is not None and starts[p] < ends.get(p, 0)]
        if gaps:
            rows.extend(self._after_gaps(topic, {p: starts[p] for p in gaps}, share, columns))
        if len(rows) > limit:
            # Trim fairly and keep a prefix of every partition: first messages of all partitions
            # before second ones, and so on.
            rows.sort(key=lambda r: (r.offset - starts.get(r.partition, 0), r.partition))
            rows = rows[:limit]
        rows.sort(key=lambda r: (r.partition, r.offset))
        return rows

    def _windows(self, topic: str, windows: dict[int, tuple[int, int]], columns: str) -> list[Any]:
        out: list[Any] = []
        items = sorted(windows.items())
        with self.engine.connect() as conn:
            for i in range(0, len(items), _OR_CHUNK):
                chunk = items[i: i + _OR_CHUNK]
                params: dict[str, Any] = {"t": topic}
                for n, (p, (s, k)) in enumerate(chunk):
                    params.update({f"p{n}": p, f"s{n}": s, f"e{n}": s + k})
                out.extend(conn.execute(_window_sql(len(chunk), columns), params).all())
        return out

    def _after_gaps(self, topic: str, starts: dict[int, int], share: int, columns: str) -> list[Any]:
        m = messages.c
        firsts: dict[int, int] = {}
        with self.engine.connect() as conn:
            for p, start in starts.items():
                found = conn.execute(select(m.offset).where(m.topic == topic, m.partition == p, m.offset >= start)
                                     .order_by(m.offset).limit(1)).scalar()
                if found is not None and found > start:
                    firsts[p] = found
        if not firsts:
            return []
        return self._windows(topic, {p: (o, share) for p, o in firsts.items()}, columns)
