"""Consumer groups' rows in SQL: :class:`~broker.store.group_tables.GroupTables` on SQLite, PostgreSQL or MariaDB.

Only storage: every rule (limits, conflicts, when to rebalance, the fair read) is in
:class:`~broker.store.groups.GroupStore`. Each method is one transaction.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, and_, bindparam, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from .group_tables import Plan, StoredRow, StoredSize, Subscriber, Windows
from .schema import assignments, delivery_options, group_offsets, messages, subscribers
from .schema import partitions as partition_table
from .sql import Store

_OR_CHUNK = 100
_Read = TypeVar("_Read", StoredRow, StoredSize)

_ROWS = ", ".join(f'"{c.name}"' for c in messages.columns)
# What a message weighs against a byte cap: the bytes it stores (body, headers, id, key, content
# type). Its JSON rendering is a little larger; a binary body sent as base64 is 4/3 of it.
_SIZES = ('"partition", "offset", length("body") + length("headers") + length("id") '
          '+ coalesce(length("key"), 0) + length("content_type") AS size')


@functools.lru_cache(maxsize=4 * _OR_CHUNK)
def _window_sql(terms: int, columns: str, mark: str) -> str:
    """``SELECT`` of several [start, end) offset windows, with the driver's positional ``mark``.
    Plain text run on the driver's own cursor: building the same expression with SQLAlchemy's
    operators, and its result rows, cost more than running it. The topic goes inside every term
    so that SQLite searches the primary key once per term (MULTI-INDEX OR) instead of scanning
    the whole topic."""
    term = f'("topic" = {mark} AND "partition" = {mark} AND "offset" >= {mark} AND "offset" < {mark})'
    return f"SELECT {columns} FROM toymb_messages WHERE {' OR '.join([term] * terms)}"


_ADVANCE_SQL = ('UPDATE toymb_group_offsets SET "next_offset" = ? '
                'WHERE "topic" = ? AND "group_name" = ? AND "partition" = ? AND "next_offset" < ?')


@functools.lru_cache(maxsize=256)
def _offsets_sql(count: int, mark: str) -> str:
    """``SELECT`` of a group's committed offsets of ``count`` partitions, with the driver's ``mark``."""
    return ('SELECT "partition", "next_offset" FROM toymb_group_offsets WHERE "topic" = {0} AND "group_name" = {0} '
            'AND "partition" IN ({1})').format(mark, ", ".join([mark] * count))


# The statements of a registration and of the dispatcher's reload, built once with bound
# parameters: building ``column == value`` expressions and their cache keys anew on every call
# cost more than running the statements (a registration made a dozen of them).
_GET = select(subscribers).where(subscribers.c.id == bindparam("sid"))
_MEMBERS = (select(subscribers).where(subscribers.c.topic == bindparam("topic"),
                                      subscribers.c.group_name == bindparam("group"))
            .order_by(subscribers.c.id))
_LIVE = select(subscribers.c.id).where(subscribers.c.topic == bindparam("topic"),
                                       subscribers.c.group_name == bindparam("group"),
                                       subscribers.c.lease_until_ms >= bindparam("at"))
_ASSIGNMENT = select(assignments.c.partition, assignments.c.subscriber_id).where(
    assignments.c.topic == bindparam("topic"), assignments.c.group_name == bindparam("group"))
_COMMITTED = select(group_offsets.c.partition, group_offsets.c.next_offset).where(
    group_offsets.c.topic == bindparam("topic"), group_offsets.c.group_name == bindparam("group"))
_OPTIONS = select(delivery_options.c.scope, delivery_options.c.options).where(
    delivery_options.c.topic == bindparam("topic"), delivery_options.c.group_name == bindparam("group"))


_DROP_OPTIONS = delete(delivery_options).where(
    delivery_options.c.topic == bindparam("topic"), delivery_options.c.group_name == bindparam("group"),
    delivery_options.c.scope == bindparam("scope"))
_PUT_OPTIONS = delivery_options.insert().values(topic=bindparam("topic"), group_name=bindparam("group"),
                                                scope=bindparam("scope"), options=bindparam("options"))
_INSERT_SUBSCRIBER = subscribers.insert()
_UPDATE_SUBSCRIBER = update(subscribers).where(subscribers.c.id == bindparam("sid"))
_UNASSIGN_SQL = 'DELETE FROM toymb_assignments WHERE "topic" = ? AND "group_name" = ? AND "partition" = ?'
_ASSIGN_SQL = 'INSERT INTO toymb_assignments ("topic", "group_name", "partition", "subscriber_id") VALUES (?, ?, ?, ?)'
_INSERT_OFFSETS_SQL = ('INSERT INTO toymb_group_offsets ("topic", "group_name", "partition", "next_offset") '
                       'VALUES (?, ?, ?, ?)')


def _subscriber(row: Any) -> Subscriber:
    return Subscriber(row.id, row.topic, row.group_name, row.mode, row.url, bool(row.compat),
                      row.lease_until_ms)


class SqlGroupTables:
    """Subscribers, assignments and group offsets in the tables of a :class:`Store`'s database."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine
        self.store = store
        # SQLite's driver lets go of the GIL for every row it steps to. With a dozen push rounds
        # reading at once, each of those let-gos handed the GIL to another thread and cost a
        # context switch to get back (316 switches and 5.6 ms of CPU per 100-message push on the
        # drain bench; one reader at a time: 16 switches, 2.2 ms). The rows come from the page
        # cache, so readers lose no parallelism waiting here; over a network (PostgreSQL,
        # MariaDB) the wait is the round trip, and reads overlap.
        self._sqlite = self.engine.dialect.name == "sqlite"
        self._mark = "?" if self._sqlite else "%s"  # the driver's positional parameter
        self._read_turn: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if self._sqlite else contextlib.nullcontext())
        # Taking turns, SQLite's readers need one connection, kept open: checking one out of the
        # pool and resetting it on return cost more than reading a push's hundred rows, and a
        # kept connection keeps its page cache from one read to the next (until a commit).
        self._reader: Connection | None = None
        store.on_dispose.append(self._close_reader)

    # -- subscribers --------------------------------------------------------------------------

    def get(self, sid: str) -> Subscriber | None:
        with self.engine.connect() as conn:
            row = conn.execute(_GET, {"sid": sid}).first()
        return None if row is None else _subscriber(row)

    def topic_of(self, sid: str) -> str | None:
        with self.engine.connect() as conn:
            topic = conn.execute(select(subscribers.c.topic).where(subscribers.c.id == sid)).scalar()
        return None if topic is None else str(topic)

    def members(self, topic: str, group: str) -> list[Subscriber]:
        with self.engine.connect() as conn:
            return [_subscriber(r) for r in conn.execute(_MEMBERS, {"topic": topic, "group": group}).all()]

    @staticmethod
    def _values(subscriber: Subscriber) -> dict[str, Any]:
        return {"mode": subscriber.mode, "url": subscriber.url, "compat": int(subscriber.compat),
                "lease_until_ms": subscriber.lease_until_ms}

    def _insert(self, conn: Connection, subscriber: Subscriber, created_ms: int) -> None:
        conn.execute(_INSERT_SUBSCRIBER, {"id": subscriber.id, "topic": subscriber.topic,
                                          "group_name": subscriber.group, "created_ms": created_ms,
                                          **self._values(subscriber)})

    def _update(self, conn: Connection, subscriber: Subscriber) -> None:
        conn.execute(_UPDATE_SUBSCRIBER, {"sid": subscriber.id, **self._values(subscriber)})

    def set_lease(self, sid: str, lease_until_ms: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(subscribers).where(subscribers.c.id == sid).values(lease_until_ms=lease_until_ms))

    def delete_subscriber(self, topic: str, group: str, sid: str) -> bool:
        with self.engine.begin() as conn:
            gone = conn.execute(delete(subscribers).where(
                subscribers.c.id == sid, subscribers.c.topic == topic, subscribers.c.group_name == group)).rowcount
        return bool(gone)

    def purge(self, before_ms: int) -> int:
        lease = subscribers.c.lease_until_ms
        # Expired (a positive lease) or revoked (minus the moment of revocation) before before_ms.
        ended = or_(and_(lease > 0, lease < before_ms), and_(lease <= 0, lease > -before_ms))
        with self.engine.begin() as conn:
            gone = int(conn.execute(delete(subscribers).where(ended)).rowcount)
            # The options of subscribers no longer registered (their secrets) go with them.
            conn.execute(delete(delivery_options).where(
                delivery_options.c.scope != "",
                delivery_options.c.scope.not_in(select(subscribers.c.id).scalar_subquery())))
            return gone

    def stale_groups(self, at_ms: int) -> list[tuple[str, str]]:
        joined = assignments.outerjoin(subscribers, subscribers.c.id == assignments.c.subscriber_id)
        query = (select(assignments.c.topic, assignments.c.group_name).distinct().select_from(joined)
                 .where(or_(subscribers.c.id.is_(None), subscribers.c.lease_until_ms < at_ms)))
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def expired_between(self, since_ms: int, at_ms: int) -> list[tuple[str, str]]:
        lease = subscribers.c.lease_until_ms
        query = (select(subscribers.c.topic, subscribers.c.group_name).distinct()
                 .where(lease >= since_ms, lease < at_ms))
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def live_groups(self, at_ms: int, mode: str | None) -> list[tuple[str, str]]:
        query = select(subscribers.c.topic, subscribers.c.group_name).distinct().where(
            subscribers.c.lease_until_ms >= at_ms)
        if mode is not None:
            query = query.where(subscribers.c.mode == mode)
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    def all_groups(self) -> list[tuple[str, str]]:
        query = select(group_offsets.c.topic, group_offsets.c.group_name).distinct()
        with self.engine.connect() as conn:
            return [(t, g) for t, g in conn.execute(query)]

    # -- assignment ---------------------------------------------------------------------------

    def join(self, subscriber: Subscriber, created_ms: int | None, at_ms: int, plan: Plan) -> dict[int, str] | None:
        # One transaction, so one commit (and one fsync) for a registration's subscriber row and
        # the assignment it changes; a member that joins is never stored without its partitions.
        inserted = False
        try:
            with self.engine.begin() as conn:
                if created_ms is None:
                    self._update(conn, subscriber)
                else:
                    self._insert(conn, subscriber, created_ms)
                inserted = True
                return self._reassign(conn, subscriber.topic, subscriber.group, at_ms, plan)
        except IntegrityError:
            if inserted or created_ms is None:
                raise  # not the subscriber's id: a fault of the assignment rows, not a race
            return None

    def reassign(self, topic: str, group: str, at_ms: int, plan: Plan) -> dict[int, str]:
        with self.engine.begin() as conn:
            return self._reassign(conn, topic, group, at_ms, plan)

    def _reassign(self, conn: Connection, topic: str, group: str, at_ms: int, plan: Plan) -> dict[int, str]:
        live = list(conn.execute(_LIVE, {"topic": topic, "group": group, "at": at_ms}).scalars().all())
        # fetchall, not a row at a time: SQLAlchemy's per-row fetch cost more than the read.
        current = dict(conn.execute(_ASSIGNMENT, {"topic": topic, "group": group}).tuples().all())
        new = plan(live, current)
        # Only what changed is written: a rebalance that moves nothing writes nothing. In the
        # driver's own text and executemany: SQLAlchemy made each row's parameters in Python.
        mark = self._mark
        moved = [(topic, group, p) for p, s in current.items() if new.get(p) != s]
        if moved:
            conn.exec_driver_sql(_UNASSIGN_SQL.replace("?", mark), moved)
        added = [(topic, group, p, s) for p, s in new.items() if current.get(p) != s]
        if added:
            conn.exec_driver_sql(_ASSIGN_SQL.replace("?", mark), added)
        return new

    def assignment(self, topic: str, group: str) -> dict[int, str]:
        with self.engine.connect() as conn:
            return dict(conn.execute(_ASSIGNMENT, {"topic": topic, "group": group}).tuples().all())

    def partitions_of(self, sid: str) -> list[int]:
        query = select(assignments.c.partition).where(assignments.c.subscriber_id == sid).order_by(
            assignments.c.partition)
        with self.engine.connect() as conn:
            return [p for (p,) in conn.execute(query)]

    # -- offsets ------------------------------------------------------------------------------

    def committed(self, topic: str, group: str) -> dict[int, int]:
        with self.engine.connect() as conn:
            return dict(conn.execute(_COMMITTED, {"topic": topic, "group": group}).tuples().all())

    def insert_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        rows = [(topic, group, p, n) for p, n in offsets.items()]
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(_INSERT_OFFSETS_SQL.replace("?", self._mark), rows)
        except IntegrityError:
            pass  # another registration of the same new group won the race; its offsets stand

    def advance_offsets(self, topic: str, group: str, next_offsets: dict[int, int], *,
                        durable: bool = True) -> dict[int, int]:
        # Plain text on the driver's cursor, as the message windows: push delivery commits a group's
        # offsets many times a second, and SQLAlchemy's expanding IN and executemany parameters
        # cost several times the statements themselves, all of it holding the GIL.
        mark = "?" if self.engine.dialect.name == "sqlite" else "%s"
        with (self.engine if durable else self.store.lazy_engine()).begin() as conn:
            cursor = conn.connection.cursor()
            try:
                cursor.execute(_offsets_sql(len(next_offsets), mark), [topic, group, *next_offsets])
                old = {int(p): int(n) for p, n in cursor.fetchall()}
                moved = {p: old[p] for p, n in next_offsets.items() if n > old.get(p, n)}
                if moved:
                    # The condition repeats the check: a concurrent commit may have moved further.
                    cursor.executemany(_ADVANCE_SQL.replace("?", mark),
                                       [(next_offsets[p], topic, group, p, next_offsets[p]) for p in moved])
            finally:
                cursor.close()
        return moved

    def lag_sums(self, topics: Sequence[str]) -> dict[tuple[str, str], int]:
        query = (select(group_offsets.c.topic, group_offsets.c.group_name,
                        func.sum(partition_table.c.next_offset - group_offsets.c.next_offset))
                 .select_from(group_offsets.join(partition_table, and_(
                     partition_table.c.topic == group_offsets.c.topic,
                     partition_table.c.partition == group_offsets.c.partition)))
                 .where(group_offsets.c.topic.in_(list(topics)))
                 .group_by(group_offsets.c.topic, group_offsets.c.group_name))
        with self.engine.connect() as conn:
            return {(t, g): int(n or 0) for t, g, n in conn.execute(query)}

    def lagging(self, topics: Sequence[str]) -> dict[tuple[str, str], dict[int, tuple[int, int]]]:
        query = (select(group_offsets.c.topic, group_offsets.c.group_name, group_offsets.c.partition,
                        group_offsets.c.next_offset, partition_table.c.next_offset)
                 .select_from(group_offsets.join(partition_table, and_(
                     partition_table.c.topic == group_offsets.c.topic,
                     partition_table.c.partition == group_offsets.c.partition)))
                 .where(group_offsets.c.topic.in_(list(topics)),
                        partition_table.c.next_offset > group_offsets.c.next_offset))
        out: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
        with self.engine.connect() as conn:
            for t, g, p, committed, end in conn.execute(query):
                out.setdefault((t, g), {})[int(p)] = (int(committed), int(end))
        return out

    def set_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        where = (group_offsets.c.topic == topic, group_offsets.c.group_name == group)
        with self.engine.begin() as conn:
            have = {p for (p,) in conn.execute(select(group_offsets.c.partition).where(
                *where, group_offsets.c.partition.in_(list(offsets))))}
            rows = [{"b_p": p, "b_n": n} for p, n in offsets.items() if p in have]
            if rows:
                conn.execute(update(group_offsets).where(*where, group_offsets.c.partition == bindparam("b_p"))
                             .values(next_offset=bindparam("b_n")), rows)
            fresh = [{"topic": topic, "group_name": group, "partition": p, "next_offset": n}
                     for p, n in offsets.items() if p not in have]
            if fresh:
                conn.execute(group_offsets.insert(), fresh)

    def offsets_since(self, topic: str, partitions: Sequence[int], timestamp_ms: int) -> dict[int, int]:
        m = messages.c
        # No index on timestamp: publishers may give timestamps, so they need not grow with offsets,
        # and a seek is rare enough to read the topic's rows once (through its primary key's prefix).
        query = (select(m.partition, func.min(m.offset)).where(
            m.topic == topic, m.partition.in_(list(partitions)), m.timestamp >= timestamp_ms)
            .group_by(m.partition))
        with self.engine.connect() as conn:
            return {int(p): int(o) for p, o in conn.execute(query) if o is not None}

    # -- delivery options ---------------------------------------------------------------------

    def options(self, topic: str, group: str) -> dict[str, str]:
        with self.engine.connect() as conn:
            rows = conn.execute(_OPTIONS, {"topic": topic, "group": group}).tuples().all()
        return {str(scope): str(text) for scope, text in rows}

    def put_options(self, topic: str, group: str, scope: str, text: str | None) -> None:
        key = {"topic": topic, "group": group, "scope": scope}
        with self.engine.begin() as conn:
            # Delete then insert, in one transaction: portable across the three databases.
            conn.execute(_DROP_OPTIONS, key)
            if text is not None:
                conn.execute(_PUT_OPTIONS, {**key, "options": text})

    # -- message windows ----------------------------------------------------------------------

    def rows(self, topic: str, windows: Windows) -> list[StoredRow]:
        return self._windows(topic, windows, _ROWS, StoredRow._make)

    def sizes(self, topic: str, windows: Windows) -> list[StoredSize]:
        return self._windows(topic, windows, _SIZES, StoredSize._make)

    def _windows(self, topic: str, windows: Windows, columns: str, make: Callable[[Any], _Read]) -> list[_Read]:
        out: list[_Read] = []
        items = sorted(windows.items())
        mark = "?" if self._sqlite else "%s"
        with self._read_turn, self._reading() as conn:
            cursor = conn.connection.cursor()
            try:
                for i in range(0, len(items), _OR_CHUNK):
                    chunk = items[i: i + _OR_CHUNK]
                    params: list[Any] = []
                    for p, (s, k) in chunk:
                        params += (topic, p, s, s + k)
                    cursor.execute(_window_sql(len(chunk), columns, mark), params)
                    out.extend(map(make, cursor.fetchall()))
            finally:
                cursor.close()
        return out

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection for message windows: on SQLite the kept one (the caller holds the read
        turn), elsewhere one from the pool. Its statements run on the driver's cursor, outside any
        transaction of SQLAlchemy's, so between reads it holds no lock and no snapshot."""
        if not self._sqlite:
            with self.engine.connect() as conn:
                yield conn
            return
        if self._reader is None:
            self._reader = self.engine.connect()
        try:
            yield self._reader
        except BaseException:
            self._close_reader()  # a broken connection is not kept: the next read opens another
            raise

    def _close_reader(self) -> None:
        conn, self._reader = self._reader, None
        if conn is not None:
            with contextlib.suppress(Exception):  # it is being dropped either way
                conn.close()

    def first_offsets(self, topic: str, starts: dict[int, int]) -> dict[int, int]:
        m = messages.c
        firsts: dict[int, int] = {}
        with self.engine.connect() as conn:
            for p, start in starts.items():
                found = conn.execute(select(m.offset).where(m.topic == topic, m.partition == p, m.offset >= start)
                                     .order_by(m.offset).limit(1)).scalar()
                if found is not None:
                    firsts[p] = int(found)
        return firsts
