"""The journal's and retention's queries, as one typed repository over the store's tables.

The journal job (``journal_spark``) reads the partitions' end offsets and ranges of message rows,
and records how far it has journaled each topic-partition (``toymb_journal_offsets``). Retention
(``broker.retention``) combines those journaled offsets with the groups' committed offsets to
delete rows nobody needs in SQL any more. Every method takes and returns plain Python values;
each one is its own connection (and transaction), as the callers used them before. The in-memory
twin (``memory_journal.py``) pages ranges and computes retention's limits with the same
:func:`pages` and :func:`retention_limits`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, delete, func, select

from .dialects import normalize_url, upsert_keep_larger
from .engines import open_engine
from .schema import group_offsets, journal_offsets, message_ids, messages, partitions, subscribers
from .sql import Store

# One contiguous run of offsets: (topic, partition, from offset, to offset exclusive).
Range = tuple[str, int, int, int]

# The columns of the rows :meth:`JournalStore.read_ranges` yields, in their order.
ROW_COLUMNS: tuple[str, ...] = (
    "id", "topic", "partition", "offset", "key", "headers", "timestamp", "content_type", "body",
)

PAGE_ROWS = 5000   # rows fetched by one query of :meth:`JournalStore.read_ranges`

_SELECT = ('SELECT id, topic, "partition", "offset", "key", headers, "timestamp", content_type, body '
           'FROM toymb_messages WHERE topic = {p} AND "partition" = {p} '
           'AND "offset" >= {p} AND "offset" < {p} ORDER BY "offset"')


def pages(ranges: Sequence[Range], page_rows: int) -> Iterator[Range]:
    """``ranges`` cut into pages of at most ``page_rows`` offsets, in order."""
    for topic, partition, lo, hi in ranges:
        for start in range(lo, hi, page_rows):
            yield topic, partition, start, min(hi, start + page_rows)


def retention_limits(partition_count: int, journaled: Mapping[int, int],
                     committed: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """Per partition, the first offset retention must keep: the journaled offset (0 without one),
    lowered to every group's committed offset (0 without one); partitions at 0 are left out.

    ``committed`` holds one mapping per group of the topic (partition -> next offset).
    """
    groups = list(committed)
    limits = {}
    for p in range(partition_count):
        limit = journaled.get(p, 0)
        for offsets in groups:
            limit = min(limit, offsets.get(p, 0))
        if limit > 0:
            limits[p] = limit
    return limits


class JournalStore:
    """End offsets, message ranges, journaled offsets and retention's limits and deletes.

    Built from a store URL (it then opens and owns its engine; unpooled by default, as the journal
    job's processes and Spark tasks want) or over an existing engine, e.g. a node's
    :class:`~broker.store.sql.Store` (:meth:`of`), which :meth:`dispose` then leaves alone.
    """

    def __init__(self, url: str | None = None, *, engine: Engine | None = None, pooled: bool = False) -> None:
        if engine is None:
            if url is None:
                raise ValueError("JournalStore needs a URL or an engine")
            self.url = normalize_url(url)
            self._engine = open_engine(self.url, pooled=pooled)
            self._owned = True
        else:
            self.url = normalize_url(url) if url is not None else engine.url.render_as_string(hide_password=False)
            self._engine = engine
            self._owned = False

    @classmethod
    def of(cls, store: Store) -> JournalStore:
        """A repository sharing ``store``'s engine (and its pool); disposing it leaves ``store`` open."""
        return cls(store.url, engine=store.engine)

    @property
    def dialect(self) -> str:
        """``sqlite``, ``postgresql``, ``mariadb`` or ``mysql``."""
        return self._engine.dialect.name

    def dispose(self) -> None:
        """Close the engine's connections, if this repository opened the engine itself."""
        if self._owned:
            self._engine.dispose()

    # -- the journal's source --------------------------------------------------------------------

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to be written, per (topic, partition) of every topic."""
        query = select(partitions.c.topic, partitions.c.partition, partitions.c.next_offset)
        with self._engine.connect() as conn:
            return {(topic, int(partition)): int(nxt) for topic, partition, nxt in conn.execute(query)}

    def read_ranges(self, ranges: Sequence[Range], page_rows: int = PAGE_ROWS) -> Iterator[list[tuple[Any, ...]]]:
        """The message rows of ``ranges`` in offset order, a page (one query) of at most ``page_rows`` at a time.

        Each row is a tuple of the driver's values in :data:`ROW_COLUMNS` order (``body`` may be a
        ``memoryview`` rather than ``bytes`` with some drivers); empty pages are skipped. This is
        the journal's hot loop, so it goes through the DB-API cursor (not SQLAlchemy rows): no
        Python code runs per row. One connection serves all of ``ranges``; it is released when
        the iterator is exhausted or closed.
        """
        marker = "?" if self._engine.dialect.paramstyle == "qmark" else "%s"
        sql = _SELECT.format(p=marker)
        with self._engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                for page in pages(ranges, page_rows):
                    cursor.execute(sql, page)
                    rows = cursor.fetchall()
                    if rows:
                        yield rows
            finally:
                cursor.close()

    # -- journaled offsets -----------------------------------------------------------------------

    def journaled_offsets(self) -> dict[tuple[str, int], int]:
        """How far the journal has recorded each (topic, partition): one past its last journaled offset."""
        query = select(journal_offsets.c.topic, journal_offsets.c.partition, journal_offsets.c.next_offset)
        with self._engine.connect() as conn:
            return {(t, int(p)): int(n) for t, p, n in conn.execute(query)}

    def record_journaled(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Move the journaled offsets forward to ``offsets`` ({(topic, partition): next}), never back.

        One transaction: an upsert keeping the larger of the stored and the given offset.
        """
        rows = [{"topic": t, "partition": int(p), "next_offset": int(n)} for (t, p), n in offsets.items()]
        if not rows:
            return
        stmt = upsert_keep_larger(self.dialect, journal_offsets, ("topic", "partition"), "next_offset")
        with self._engine.begin() as conn:
            conn.execute(stmt, rows)

    # -- retention -------------------------------------------------------------------------------

    def retention_limits(self, topic: str, partition_count: int) -> dict[int, int]:
        """Per partition of ``topic``, the first offset that must stay because it is unjournaled or unacknowledged.

        The limit is the journaled offset (0 without one), lowered to the committed offset of every
        group of the topic (groups with subscribers or committed offsets; a group without a
        committed offset for the partition keeps all of it). Partitions whose limit is 0 (nothing
        may go) are left out. The three queries run in one transaction.
        """
        with self._engine.connect() as conn:
            journaled = {p: n for p, n in conn.execute(
                select(journal_offsets.c.partition, journal_offsets.c.next_offset)
                .where(journal_offsets.c.topic == topic))}
            committed: dict[str, dict[int, int]] = {}
            for group, p, n in conn.execute(
                    select(group_offsets.c.group_name, group_offsets.c.partition, group_offsets.c.next_offset)
                    .where(group_offsets.c.topic == topic)):
                committed.setdefault(group, {})[p] = n
            for (group,) in conn.execute(select(subscribers.c.group_name).distinct()
                                         .where(subscribers.c.topic == topic)):
                committed.setdefault(group, {})
        return retention_limits(partition_count, journaled, committed.values())

    def lowest_offset(self, topic: str, partition: int) -> int | None:
        """The smallest offset still stored in ``topic``/``partition``, or None if it holds no row."""
        with self._engine.connect() as conn:
            low = conn.execute(select(func.min(messages.c.offset))
                               .where(messages.c.topic == topic, messages.c.partition == partition)).scalar()
        return None if low is None else int(low)

    def delete_expired(self, topic: str, partition: int, low: int, high: int, cutoff_ms: int) -> int:
        """Delete the rows of ``topic``/``partition`` with ``low <= offset < high`` and a timestamp before
        ``cutoff_ms``, in one transaction; returns how many were deleted."""
        with self._engine.begin() as conn:
            count = conn.execute(delete(messages).where(
                messages.c.topic == topic, messages.c.partition == partition,
                messages.c.offset >= low, messages.c.offset < high,
                messages.c.timestamp < cutoff_ms)).rowcount
            if count:
                # The ids of the rows just deleted may be published again, as new messages.
                gone = ~select(messages.c.offset).where(
                    messages.c.topic == message_ids.c.topic, messages.c.partition == message_ids.c.partition,
                    messages.c.offset == message_ids.c.offset).exists()
                conn.execute(delete(message_ids).where(
                    message_ids.c.topic == topic, message_ids.c.partition == partition,
                    message_ids.c.offset >= low, message_ids.c.offset < high, gone))
        return int(count or 0)
