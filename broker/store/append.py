"""The group-commit writer's transaction: fence the topics, look up given ids, and write message rows
straight to the DBAPI (the hot path of every publish)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from ..envelope import NewMessage
from . import dialects
from .records import GivenId, TopicClaim
from .schema import message_ids, topics

if TYPE_CHECKING:
    from .sql import Store

_ID_CHUNK = 500
# Bodies up to this many bytes are bound to SQLite as a copy (see sqlite_message_row).
COPIED_BODY_MAX = 4096
# How a transaction builds a message's row: (topic, partition, offset, message) -> row.
RowOf = Callable[[str, int, int, NewMessage], tuple[Any, ...]]
# The columns of a message row, in the order of :func:`message_row`.
_MESSAGE_COLUMNS = 'topic, "partition", "offset", id, "key", headers, content_type, body, timestamp'


def message_row(topic: str, partition: int, offset: int, message: NewMessage) -> tuple[Any, ...]:
    """The row of ``message`` as :meth:`AppendTransaction.write` inserts it."""
    headers = json.dumps(message.headers, separators=(",", ":")) if message.headers else "{}"
    return (topic, partition, offset, message.id, message.key, headers, message.content_type, message.body,
            message.timestamp)


def sqlite_message_row(topic: str, partition: int, offset: int, message: NewMessage) -> tuple[Any, ...]:
    """:func:`message_row` with a small body as a ``bytearray`` (the same BLOB is stored).

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


class AppendTransaction:
    """The writer's view of one open transaction: fence the topics, then read ids and write rows."""

    def __init__(self, store: Store, conn: Connection) -> None:
        self._store = store
        self._conn = conn
        # What the writer builds each row with (see sqlite_message_row).
        self.row: RowOf = sqlite_message_row if store.dialect == "sqlite" else message_row
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
