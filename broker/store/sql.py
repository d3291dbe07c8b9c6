"""The message store over SQLAlchemy: topics, the writer's transactions, ranges and end offsets.

Every method takes and returns plain values. The group-commit writer (``broker.appender``) is the
only one to write messages, through :meth:`Store.append_transaction` (:mod:`.append`); everything
else reads. Engines are opened by :mod:`.engines`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, bindparam, create_engine, func, inspect, select
from sqlalchemy.exc import IntegrityError

from ..envelope import MessageRow
from . import dialects, schema
from .append import AppendTransaction
from .checkpoint import WalCheckpointer
from .dialects import normalize_url as normalize_url  # where callers have always found it
from .engines import create_tables, open_engine, sqlite_file
from .records import Topic
from .schema import message_ids, messages, partitions, topics

log = logging.getLogger(__name__)

# Built once: the dispatcher reads a topic's ends at every reload of a group, and building the
# expression cost more than the read. Fetched at once (fetchall), not a SQLAlchemy row at a time.
_END_OFFSETS = select(partitions.c.partition, partitions.c.next_offset).where(partitions.c.topic == bindparam("topic"))


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
