"""The narrow store interface over SQLAlchemy: topics, appends, ranges and end offsets.

Every method takes and returns plain values. The group-commit writer (``broker.appender``)
is the only caller of :meth:`Store.write`; everything else reads.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, create_engine, event, func, inspect, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import NullPool

from ..envelope import MessageRow, NewMessage
from . import dialects, schema
from .checkpoint import WRITER_BUSY_TIMEOUT_MS, WalCheckpointer, background_pragmas
from .dialects import normalize_url as normalize_url  # where callers have always found it
from .schema import message_ids, messages, partitions, topics

log = logging.getLogger(__name__)

_ID_CHUNK = 500
# Built once: the dispatcher reads a topic's ends at every reload of a group, and building the
# expression cost more than the read. Fetched at once (fetchall), not a SQLAlchemy row at a time.
_END_OFFSETS = select(partitions.c.partition, partitions.c.next_offset).where(partitions.c.topic == bindparam("topic"))

# A publisher-given id's row in toymb_message_ids: (topic, id, partition, offset).
GivenId = tuple[str, str, int, int]


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    owner: str | None = None
    epoch: int = 0


@dataclass(frozen=True)
class TopicClaim:
    """Who sequences a topic, and the epoch they claimed it at (``toymb_topics.owner, epoch``)."""

    owner: str | None
    epoch: int


def open_engine(url: str, *, pool_size: int = 20, pooled: bool = True, synchronous: str = "FULL",
                checkpointer: WalCheckpointer | None = None) -> Engine:
    """An engine with SQLite in WAL mode (full sync: an ack survives power loss), PostgreSQL or MariaDB.

    ``synchronous`` is SQLite's setting for this engine's connections: ``NORMAL`` only for writes
    that a power loss may take back (see :meth:`Store.lazy_engine`). With a ``checkpointer`` (of
    the same SQLite file), the connections' commits never checkpoint: it does, in the background,
    started when the first connection opens.
    """
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                               poolclass=None if pooled else NullPool)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute(f"PRAGMA busy_timeout={WRITER_BUSY_TIMEOUT_MS}")
            if checkpointer is not None:
                background_pragmas(cursor, checkpointer.limit_bytes)
                checkpointer.start()
            cursor.close()

        return engine
    options = dialects.engine_options(url)
    if pooled:
        return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, **options)
    return create_engine(url, poolclass=NullPool, **options)


def background_checkpointer(url: str) -> WalCheckpointer | None:
    """A :class:`~broker.store.checkpoint.WalCheckpointer` for the SQLite file of ``url``; None for
    another database (its server checkpoints) or an in-memory one (no log)."""
    url = normalize_url(url)
    path = sqlite_file(url) if url.startswith("sqlite") else ""
    return WalCheckpointer(path) if path else None


def sqlite_file(url: str) -> str:
    """The file of a SQLite URL; empty for an in-memory database."""
    path = url.split("///", 1)[1] if "///" in url else ""
    return "" if path == ":memory:" else path


def create_tables(engine: Engine, create: Callable[[Connection], None]) -> None:
    """Run ``create`` (which creates missing tables) under the schema lock, retrying when another
    process raced it: safe when several processes start on one database at once."""
    for attempt in range(5):
        try:
            with engine.begin() as conn, dialects.schema_lock(conn):
                create(conn)
            return
        except (IntegrityError, OperationalError) as exc:  # another process raced us
            if attempt == 4:
                raise
            log.debug("creating tables, retry: %s", exc)
            time.sleep(0.2 * (attempt + 1))


class Store:
    """Topics, messages and end offsets in one SQL database (SQLite, PostgreSQL or MariaDB)."""

    def __init__(self, url: str, *, engine: Engine | None = None, checkpointer: WalCheckpointer | None = None) -> None:
        """``checkpointer`` (of this SQLite file, see :func:`background_checkpointer`): this store's
        commits never checkpoint the write-ahead log; it does, in a thread of its own, from the
        first connection until :meth:`dispose`. A node's store has one; a store opened only to read,
        or now and then to write (tools, tests), checkpoints in its commits as SQLite does by default.
        """
        self.url = normalize_url(url)
        self.checkpointer = checkpointer
        self.engine = engine or open_engine(self.url, checkpointer=self.checkpointer)
        self._writer: Engine | None = None
        self._writer_conn: Connection | None = None   # the writer's own, kept open (a SQLite file)
        self._lazy: Engine | None = None
        # Run by dispose(): the users of connections they keep open close them.
        self.on_dispose: list[Callable[[], None]] = []

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def create_schema(self) -> None:
        """Create missing tables; safe to call from several processes at once."""

        def create(conn: Connection) -> None:
            upgrading = inspect(conn).has_table(messages.name) and not inspect(conn).has_table(message_ids.name)
            schema.metadata.create_all(conn)
            if upgrading:
                # A store from before toymb_message_ids held every id in toymb_messages (unique
                # per topic): index them all, so that ids published before stay idempotent.
                conn.execute(message_ids.insert().from_select(
                    ["topic", "id", "partition", "offset"],
                    select(messages.c.topic, messages.c.id, messages.c.partition, messages.c.offset)))

        create_tables(self.engine, create)

    def drop_schema(self) -> None:
        """Drop every table of the broker (tests and benchmarks start from an empty database)."""
        schema.metadata.drop_all(self.engine)

    def ping(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(select(1))
            return True
        except Exception:  # noqa: BLE001 - any failure means "not reachable"
            return False

    def dispose(self) -> None:
        for close in self.on_dispose:
            close()
        self._close_writer_connection()
        self.engine.dispose()
        if self._writer is not None:
            self._writer.dispose()
        if self._lazy is not None:
            self._lazy.dispose()
        if self.checkpointer is not None:
            self.checkpointer.stop()

    # -- topics -------------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(topics).where(topics.c.name == name)).first()
        return None if row is None else Topic(row.name, row.partitions, row.owner, row.epoch)

    def list_topics(self) -> list[Topic]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(topics).order_by(topics.c.name)).all()
        return [Topic(r.name, r.partitions, r.owner, r.epoch) for r in rows]

    def ensure_topic(self, name: str, partition_count: int) -> tuple[Topic, bool]:
        """The topic, created with ``partition_count`` partitions if missing; and whether it was created."""
        existing = self.get_topic(name)
        if existing is not None:
            return existing, False
        try:
            with self.engine.begin() as conn:
                conn.execute(topics.insert().values(name=name, partitions=partition_count,
                                                    created_ms=int(time.time() * 1000), epoch=0))
                conn.execute(partitions.insert(), [
                    {"topic": name, "partition": p, "next_offset": 0} for p in range(partition_count)
                ])
        except IntegrityError:
            pass  # created concurrently by another thread or node
        topic = self.get_topic(name)
        assert topic is not None
        return topic, topic.partitions == partition_count and existing is None

    # -- offsets ------------------------------------------------------------------------------

    @contextmanager
    def append_transaction(self) -> Iterator[AppendTransaction]:
        """One write transaction of the group-commit writer: committed when the block ends.

        On a SQLite file the writer keeps its one connection open between transactions: taking it
        from the pool and giving it back (with the pool's reset) at each commit cost about a tenth
        of the writer's CPU per commit. A transaction that fails closes it; the next opens another.
        On a database server each transaction takes a pooled connection, as described in
        :meth:`_writer_engine`, so that one the server dropped is replaced.
        """
        engine = self._writer_engine()
        if engine is not self._writer or self.dialect != "sqlite":
            with engine.begin() as pooled:
                yield AppendTransaction(self, pooled)
            return
        if self._writer_conn is None:
            self._writer_conn = engine.connect()
        conn = self._writer_conn
        try:
            with conn.begin():
                yield AppendTransaction(self, conn)
        except BaseException:
            self._close_writer_connection()
            raise

    def _close_writer_connection(self) -> None:
        conn, self._writer_conn = self._writer_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # it is being dropped: the next transaction opens another
                log.debug("closing the writer's connection failed", exc_info=True)

    def maintain(self) -> None:
        """Housekeeping the writer runs between two commits, once it has answered the last one: on
        a SQLite file checkpointed in the background, the log's restart when it is due
        (:meth:`~broker.store.checkpoint.WalCheckpointer.restart_if_due`)."""
        if self.checkpointer is None or self._writer is None:
            return
        wait_ms = self.checkpointer.restart_due()
        if wait_ms is None:
            return   # the usual case: no connection is taken from the pool for nothing
        if self._writer_conn is not None:
            self.checkpointer.restart(self._writer_conn.connection.dbapi_connection, wait_ms)
            return
        with self._writer.connect() as conn:
            self.checkpointer.restart(conn.connection.dbapi_connection, wait_ms)

    def _writer_engine(self) -> Engine:
        """The engine of the group-commit writer.

        On a database server, the writer has a connection of its own, checked out without the
        pool's ping: the ping was one more round trip in every commit. A connection the server
        dropped fails the writer's first statement instead, before anything is written; SQLAlchemy
        then replaces it, and the writer commits each waiting request again on its own (or answers
        a lone one 503, which publishers retry).
        """
        if self.dialect == "sqlite" and not sqlite_file(self.url):
            return self.engine  # an in-memory database exists once, in the engine's one connection
        if self._writer is None and self.dialect == "sqlite":
            # An engine of its own, so one connection (the pool hands its one user the same one
            # each time) whose page cache stays warm: the writer is the file's only writer of
            # messages, so nothing else invalidates it. Taking any connection of the shared pool,
            # whose cache another's commit had made stale, read about 0.7 pages per message back.
            self._writer = open_engine(self.url, checkpointer=self.checkpointer)
        if self._writer is None:
            self._writer = create_engine(self.url, pool_size=1, max_overflow=1, pool_pre_ping=False,
                                         **dialects.engine_options(self.url))
        return self._writer

    def lazy_engine(self) -> Engine:
        """The engine of writes that need not wait for the disk: push delivery's offset commits.

        On a SQLite file it has a connection of its own with ``synchronous=NORMAL``: its commits
        skip the fsync, and become durable with the next full commit (a publish), whose sync
        covers the whole write-ahead log before it. A power loss can only take back the last of
        them, which means pushing those messages again: delivery stays at least once. With a
        sync of their own, each push round's commit took SQLite's write lock for a disk flush
        between two publishes, and the next publish's commit waited for it (the tail of push
        latency). On a database server it is the store's engine.
        """
        if self.dialect != "sqlite" or not sqlite_file(self.url):
            return self.engine
        if self._lazy is None:
            self._lazy = open_engine(self.url, pool_size=1, synchronous="NORMAL", checkpointer=self.checkpointer)
        return self._lazy

    def end_offsets(self, topic: str, conn: Connection | None = None) -> dict[int, int]:
        """Next offset to be written, per partition."""
        if conn is not None:
            return dict(conn.execute(_END_OFFSETS, {"topic": topic}).tuples().all())
        with self.engine.connect() as own:
            return dict(own.execute(_END_OFFSETS, {"topic": topic}).tuples().all())

    @staticmethod
    def row(topic: str, partition: int, offset: int, message: NewMessage) -> tuple[Any, ...]:
        """The row of ``message`` as :meth:`AppendTransaction.write` inserts it."""
        headers = json.dumps(message.headers, separators=(",", ":")) if message.headers else "{}"
        return (topic, partition, offset, message.id, message.key, headers, message.content_type, message.body,
                message.timestamp)

    @staticmethod
    def sqlite_row(topic: str, partition: int, offset: int, message: NewMessage) -> tuple[Any, ...]:
        """:meth:`row` with a small body as a ``bytearray`` (the same BLOB is stored).

        Python's sqlite3 module binds ``str``, ``int``, ``float`` and ``bytearray`` values as they
        are, but looks any other value, ``bytes`` too, up among its adapters first, one value at a
        time (a key tuple, a dict lookup, two attribute lookups), with the GIL held: about 0.4 µs a
        row in the single writer, where copying 256 bytes costs 0.1 µs. A copy costs more than the
        look-up past about 16 KiB, so only bodies up to :data:`COPIED_BODY_MAX` are copied (at most
        that many bytes more per row of a commit).
        """
        headers = json.dumps(message.headers, separators=(",", ":")) if message.headers else "{}"
        body = message.body
        return (topic, partition, offset, message.id, message.key, headers, message.content_type,
                bytearray(body) if len(body) <= COPIED_BODY_MAX else body, message.timestamp)

    # -- reading ------------------------------------------------------------------------------

    def read_range(self, topic: str, partition: int, start: int, limit: int,
                   end: int | None = None) -> list[MessageRow]:
        """Messages of ``topic``/``partition`` from offset ``start``, at most ``limit``, before ``end``."""
        query = select(messages).where(messages.c.topic == topic, messages.c.partition == partition,
                                       messages.c.offset >= start)
        if end is not None:
            query = query.where(messages.c.offset < end)
        query = query.order_by(messages.c.offset).limit(limit)
        with self.engine.connect() as conn:
            return list(conn.execute(query).all())

    def count_messages(self, topic: str | None = None) -> int:
        query = select(func.count()).select_from(messages)
        if topic is not None:
            query = query.where(messages.c.topic == topic)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


# Bodies up to this many bytes are bound to SQLite as a copy (see Store.sqlite_row).
COPIED_BODY_MAX = 4096
# How a transaction builds a message's row: (topic, partition, offset, message) -> row.
RowOf = Callable[[str, int, int, NewMessage], tuple[Any, ...]]
# The columns of a message row, in the order of :meth:`Store.row`.
_MESSAGE_COLUMNS = 'topic, "partition", "offset", id, "key", headers, content_type, body, timestamp'


class AppendTransaction:
    """The writer's view of one open transaction: fence the topics, then read ids and write rows."""

    def __init__(self, store: Store, conn: Connection) -> None:
        self._store = store
        self._conn = conn
        # What the writer builds each row with (see Store.sqlite_row).
        self.row: RowOf = Store.sqlite_row if store.dialect == "sqlite" else Store.row
        self._claims: dict[str, TopicClaim | None] = {}  # what lock_topics read
        # SQLite's own connection, for the writer's statements (see _executemany).
        self._raw: Any = conn.connection.dbapi_connection if store.dialect == "sqlite" else None

    def lock_topics(self, names: Sequence[str], lock_timeout_ms: int) -> None:
        """Lock the rows of the topics ``names`` until commit, in one statement; :meth:`lock_topic`
        then answers from what it read.

        On PostgreSQL and MariaDB the lock wait, and an idle transaction holding the locks, end
        after ``lock_timeout_ms`` (:func:`~broker.store.dialects.lock_topic_rows`).
        """
        rows = dialects.lock_topic_rows(self._conn, names, lock_timeout_ms)
        for name in names:
            row = rows.get(name)
            self._claims[name] = None if row is None else TopicClaim(row.owner, int(row.epoch or 0))

    def lock_topic(self, topic: str, lock_timeout_ms: int) -> TopicClaim | None:
        """Lock ``topic``'s row until commit (unless :meth:`lock_topics` did) and read its claim;
        None when the topic does not exist."""
        if topic not in self._claims:
            self.lock_topics([topic], lock_timeout_ms)
        return self._claims[topic]

    def claim_topic(self, topic: str, owner: str, seen: TopicClaim) -> bool:
        """Compare-and-set: make ``owner`` the topic's owner at ``seen.epoch + 1`` if the epoch is unchanged."""
        claimed = self._conn.execute(topics.update().where(topics.c.name == topic, topics.c.epoch == seen.epoch)
                                     .values(owner=owner, epoch=seen.epoch + 1))
        return bool(claimed.rowcount == 1)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Next offset to be written, per partition, as this transaction sees it."""
        return self._store.end_offsets(topic, self._conn)

    def existing_ids(self, topic: str, ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Coordinates of the publisher-given ids among ``ids`` that ``topic`` already holds."""
        found: dict[str, tuple[int, int]] = {}
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            query = select(message_ids.c.id, message_ids.c.partition, message_ids.c.offset).where(
                message_ids.c.topic == topic, message_ids.c.id.in_(chunk))
            found.update({i: (p, o) for i, p, o in self._conn.execute(query)})
        return found

    def write(self, rows: list[tuple[Any, ...]], ends: dict[tuple[str, int], int],
              given_ids: list[GivenId]) -> None:
        """Insert message rows (from :attr:`row`), index the publisher-given ids among them
        (``(topic, id, partition, offset)``), and move the partitions' next offsets.

        It goes straight to the DBAPI (``COPY`` on PostgreSQL, ``executemany`` elsewhere): this is
        the hot path, and SQLAlchemy's per-row parameter processing would double its cost.
        """
        dialect = self._store.dialect
        mark = "?" if dialect == "sqlite" else "%s"
        conn = self._conn
        if rows and dialect == "postgresql":
            # COPY: a third of executemany's CPU per row in the writer, and fewer round trips.
            cursor = conn.connection.cursor()
            try:
                with cursor.copy(f"COPY toymb_messages ({_MESSAGE_COLUMNS}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            finally:
                cursor.close()
        elif rows:
            self._executemany(f'INSERT INTO toymb_messages ({_MESSAGE_COLUMNS}) VALUES ({", ".join([mark] * 9)})',
                              rows)
        if given_ids:
            self._executemany(
                f'INSERT INTO toymb_message_ids (topic, id, "partition", "offset") VALUES ({", ".join([mark] * 4)})',
                given_ids)
        if ends and dialect == "postgresql":
            # One statement per topic, not per partition: executemany ran one UPDATE per partition
            # on the server, a fifth of the writer's time with a batch spread over 60 partitions.
            # Per topic, not one for all: joined to a list of (topic, partition) pairs, the planner
            # read the whole table (every topic's partitions) at each commit.
            by_topic: dict[str, tuple[list[int], list[int]]] = {}
            for (topic, partition), nxt in ends.items():
                parts, nexts = by_topic.setdefault(topic, ([], []))
                parts.append(partition)
                nexts.append(nxt)
            conn.exec_driver_sql(
                'UPDATE toymb_partitions AS p SET next_offset = v.n '
                'FROM unnest(%s::int[], %s::bigint[]) AS v(pa, n) '
                'WHERE p.topic = %s AND p."partition" = v.pa',
                [(parts, nexts, topic) for topic, (parts, nexts) in by_topic.items()])
        elif ends:
            self._executemany(
                f'UPDATE toymb_partitions SET next_offset = {mark} WHERE topic = {mark} AND "partition" = {mark}',
                [(n, t, p) for (t, p), n in ends.items()])

    def _executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """``statement`` once per row. On SQLite on the DBAPI's own connection: SQLAlchemy's
        execution context around each call (a cursor wrapper, the statement's bookkeeping, a
        result object) was about 0.2 µs of the writer's CPU per message, with two or three calls
        a commit. Its errors are then sqlite3's, which :mod:`broker.store.errors` names."""
        if self._raw is not None:
            self._raw.executemany(statement, rows)
        else:
            self._conn.exec_driver_sql(statement, rows)
