"""A PySpark streaming data source over the broker's SQL store (format ``toymb``).

Rows have the envelope's columns with ``headers`` as JSON text; apply
:func:`journal_spark.schema.with_header_map` to get them as a map (the job does, for every sink).

Offsets are JSON ``{"<topic>": [next offset of partition 0, of partition 1, ...]}``: one past the
last row a micro-batch covers, per topic-partition. Offsets in the store are dense and only
committed rows are counted in ``toymb_partitions``, so an offset range names exactly the rows it
covers, and reading it again (after a crash) yields the same rows.

Options (all strings, as Spark passes them):
    url          SQLAlchemy URL of the store (required)
    max_rows     most rows in one micro-batch (default 20000)
    start        where a new checkpoint starts: ``journaled`` (toymb_journal_offsets, default),
                 ``earliest`` or ``latest``
    topics       comma-separated topics to read (default: all)
    parallelism  most Spark tasks per micro-batch (default 2)
    plan_only    ``true``: plan micro-batches but read no rows (the job reads them in the JVM,
                 :mod:`journal_spark.batch_rows`); default ``false``
    checkpoint   the query's checkpoint folder: the initial offset is kept there (required with
                 ``plan_only``, whose reader finds a batch's offsets there)
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .schema import SOURCE_SCHEMA, arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

    from broker.store import JournalRepository
    from broker.store.journal import JournalStore, Range

# Spark unpickles this module's data source in several short-lived Python processes per query
# (create, plan, the streaming runner, each task's worker). Most of them never touch the store
# or build an Arrow batch, so SQLAlchemy (through broker.store) and pyarrow are imported only
# where they are used: about 1 CPU-s less for each process that does not.

Offsets = dict[str, list[int]]

FORMAT = "toymb"
MIN_TASK_ROWS = 5000      # a micro-batch smaller than this is one Spark task
INITIAL_OFFSET_FILE = "toymb-initial-offset.json"   # inside the query's Spark checkpoint folder


class RangesPartition(InputPartition):
    """The offset ranges one Spark task reads."""

    def __init__(self, ranges: list[Range]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def read_end_offsets(store: JournalRepository, topics: frozenset[str] | None = None) -> Offsets:
    """Next offset to be written, per topic-partition, as source offsets."""
    found: dict[str, dict[int, int]] = {}
    for (topic, partition), nxt in store.end_offsets().items():
        if topics is None or topic in topics:
            found.setdefault(topic, {})[partition] = nxt
    return {t: [parts.get(p, 0) for p in range(max(parts) + 1)] for t, parts in sorted(found.items())}


def advance(start: Offsets, ends: Offsets, max_rows: int | None) -> Offsets:
    """The offsets after ``start`` that cover at most ``max_rows`` rows of ``ends``, shared fairly.

    Partitions with the smallest backlog are served first and the rest split what is left, so
    every partition progresses and the result is a pure function of its inputs (a replayed
    plan is the same plan). Offsets never move backwards, even if the store was reset.
    """
    backlog: list[tuple[int, str, int]] = []
    for topic, topic_ends in ends.items():
        begun = start.get(topic, [])
        for p, end in enumerate(topic_ends):
            lo = begun[p] if p < len(begun) else 0
            if end > lo:
                backlog.append((end - lo, topic, p))
    result: Offsets = {}
    for topic in sorted(set(start) | set(ends)):
        begun, topic_ends = start.get(topic, []), ends.get(topic, [])
        width = max(len(begun), len(topic_ends))
        result[topic] = [begun[p] if p < len(begun) else 0 for p in range(width)]
    total = sum(b for b, _, _ in backlog)
    if max_rows is None or total <= max_rows:
        grants = {(t, p): b for b, t, p in backlog}
    else:
        grants, remaining = {}, max_rows
        backlog.sort()
        for i, (b, t, p) in enumerate(backlog):
            take = min(b, remaining // (len(backlog) - i))
            grants[(t, p)] = take
            remaining -= take
    for (topic, p), take in grants.items():
        result[topic][p] += take
    return result


def keep_initial_offset(query_checkpoint: Path, compute: Callable[[], Offsets]) -> Offsets:
    """The checkpoint's initial offset: the one kept there, or ``compute()``, kept once and for all.

    Spark asks a source for its initial offset again when a query restarts before its first batch
    committed, and a ``journaled`` start may have moved by then: the first answer is the one that
    counts, for Spark's plan and for the reader of the batch's rows alike.
    """
    path = query_checkpoint / INITIAL_OFFSET_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_text(json.dumps(compute()), encoding="utf-8")
        try:
            os.link(tmp, path)          # the first writer wins; a concurrent one reads the winner's
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    offsets: Offsets = json.loads(path.read_text(encoding="utf-8"))
    return offsets


def plan_ranges(start: Offsets, end: Offsets, tasks: int) -> list[list[Range]]:
    """Split the rows between two offsets into at most ``tasks`` groups of about equal size."""
    ranges: list[Range] = []
    for topic, topic_ends in end.items():
        begun = start.get(topic, [])
        for p, hi in enumerate(topic_ends):
            lo = begun[p] if p < len(begun) else 0
            if hi > lo:
                ranges.append((topic, p, lo, hi))
    total = sum(hi - lo for _, _, lo, hi in ranges)
    if total == 0:
        return []
    count = max(1, min(tasks, math.ceil(total / MIN_TASK_ROWS)))
    per_task = math.ceil(total / count)
    groups: list[list[Range]] = [[]]
    filled = 0
    for topic, p, lo, hi in ranges:
        while lo < hi:
            if filled >= per_task:
                groups.append([])
                filled = 0
            take = min(hi - lo, per_task - filled)
            groups[-1].append((topic, p, lo, lo + take))
            filled += take
            lo += take
    return groups


def read_ranges(store: JournalRepository, ranges: Sequence[Range],
                page_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the messages in ``ranges``, one SQL query per page of at most ``page_rows``.

    This is the journal's hot loop: the store fetches raw DB-API tuples and each Arrow column is
    built from them in C; no Python code runs per row.
    """
    pages = store.read_ranges(ranges) if page_rows is None else store.read_ranges(ranges, page_rows)
    for rows in pages:
        yield _to_arrow(rows)


def _to_arrow(rows: Sequence[Any]) -> pa.RecordBatch:
    import pyarrow as pa

    ids, topics, parts, offsets, keys, headers, stamps, types, bodies = zip(*rows, strict=True)
    if bodies and not isinstance(bodies[0], bytes):   # e.g. memoryview from some drivers
        bodies = tuple(bytes(b) for b in bodies)
    return pa.RecordBatch.from_arrays([
        pa.array(ids, pa.string()), pa.array(topics, pa.string()), pa.array(parts, pa.int32()),
        pa.array(offsets, pa.int64()), pa.array(keys, pa.string()), pa.array(headers, pa.string()),
        pa.array(stamps, pa.int64()), pa.array(types, pa.string()), pa.array(bodies, pa.binary()),
    ], schema=arrow_schema())


class StoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from the store's end offsets; reads them range by range."""

    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        self.max_rows = int(options.get("max_rows", "20000"))
        self.start_mode = options.get("start", "journaled")
        listed = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
        self.topics = frozenset(listed) if listed else None
        self.parallelism = max(1, int(options.get("parallelism", "2")))
        self.plan_only = options.get("plan_only", "false").lower() == "true"
        checkpoint = options.get("checkpoint", "")
        self.checkpoint = Path(checkpoint) if checkpoint else None
        if self.plan_only and self.checkpoint is None:
            raise ValueError("the toymb source's plan_only option needs its checkpoint option")
        self._store: JournalStore | None = None
        self._target: Offsets | None = None

    @property
    def store(self) -> JournalStore:
        """The store, opened (unpooled) on first use, so a reader Spark has not used yet holds no engine."""
        if self._store is None:
            from broker.store.journal import JournalStore

            self._store = JournalStore(self.url, pooled=False)
        return self._store

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - the name Spark calls
        if self.checkpoint is not None:
            return keep_initial_offset(self.checkpoint, self._initial_offset)
        return self._initial_offset()

    def _initial_offset(self) -> Offsets:
        if self.start_mode == "latest":
            return read_end_offsets(self.store, self.topics)
        if self.start_mode == "earliest":
            return {}
        offsets: Offsets = {}
        for (topic, p), nxt in sorted(self.store.journaled_offsets().items()):
            if self.topics is not None and topic not in self.topics:
                continue
            row = offsets.setdefault(topic, [])
            row.extend([0] * (p + 1 - len(row)))
            row[p] = nxt
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - the name Spark calls
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - the name Spark calls
        ends = self._target if self._target is not None else read_end_offsets(self.store, self.topics)
        if isinstance(limit, ReadMaxRows):
            bound: int | None = limit.max_rows
        elif isinstance(limit, ReadAllAvailable) and self._target is None:
            bound = None
        else:
            # availableNow asks for everything; we still cut it into bounded batches.
            bound = self.max_rows
        return advance(start, ends, bound)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - the name Spark calls
        return read_end_offsets(self.store, self.topics)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - the name Spark calls
        self._target = read_end_offsets(self.store, self.topics)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if self.plan_only:
            return []   # no Spark task, no Python worker: foreachBatch reads the rows itself
        return [RangesPartition(group) for group in plan_ranges(start, end, self.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangesPartition)
        from broker.store.journal import JournalStore

        store = JournalStore(self.url, pooled=False)
        try:
            yield from read_ranges(store, partition.ranges)
        finally:
            store.dispose()

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: sinks record what they made durable themselves."""

    def stop(self) -> None:
        if self._store is not None:
            self._store.dispose()
            self._store = None


class StoreDataSource(DataSource):
    """``spark.readStream.format("toymb").option("url", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - the name Spark calls
        return StoreStreamReader(dict(self.options))


def register_private_format(spark: Any, owner: str) -> str:
    """Register this source again under a format name of ``owner``'s own, and return that name.

    Spark's streaming source runner adds its settings to the environment map of the registered
    Python function, and every query reading a format shares that one map. When two queries start
    together, one adds keys while the scheduler serialises the other's task, which then cannot be
    read back (``java.io.OptionalDataException`` in every attempt of that task). A registration per
    query gives each query a map of its own.
    """
    private_name = f"{FORMAT}_{re.sub(r'[^0-9A-Za-z]', '_', owner)}"

    class PrivateStoreDataSource(StoreDataSource):
        @classmethod
        def name(cls) -> str:
            return private_name

    spark.dataSource.register(PrivateStoreDataSource)
    return private_name
