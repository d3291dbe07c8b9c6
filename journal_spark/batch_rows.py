"""The journal's read path: a micro-batch's rows, read inside the JVM by Spark's JDBC reader.

The Python streaming source (:mod:`.source`) only plans: it says which offsets each micro-batch
covers and Spark records them in the query's offset log before the batch runs. The rows
themselves are read here, in ``foreachBatch``, by ``spark.read.jdbc`` with one predicate per
Spark task over ``(topic, partition, offset)`` ranges. The rows travel from the database into
the JVM's own columnar rows and on to the table (or a bridge) without a Python worker, Arrow
batches or pickling: reading them in Python workers cost three quarters of a micro-batch.

Which offsets. A batch's end offsets are its entry in the offset log (``offsets/<id>``), its start
offsets the previous entry's, or for the first batch of a checkpoint the source's initial
offset, which the source keeps in the checkpoint (``INITIAL_OFFSET_FILE``) so that it is the same
every time Spark asks. Rows are immutable once committed and offsets are dense, so a batch that
runs again after a crash reads exactly the rows it read before.

The JDBC drivers (sqlite-jdbc, PostgreSQL's, MariaDB's) come from Maven with Delta's jars
(``services/spark.sh install``); see :mod:`.delta_jars`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from .errors import JournalError
from .schema import COLUMNS, as_spark_schema
from .source import INITIAL_OFFSET_FILE, Offsets, plan_ranges

if TYPE_CHECKING:
    from broker.store.journal import Range

TABLE = "toymb_messages"
TASK_COLUMN = "toymb_task"   # which Spark task reads a row, in a tagged_ranges_table
# SQLite refuses a compound SELECT of more than 500 arms (SQLITE_MAX_COMPOUND_SELECT): a batch of
# more ranges than this reads them OR-ed, as other stores do.
MAX_UNION_ARMS = 400
FETCH_ROWS = 5000          # rows per JDBC fetch: a bounded buffer per task
SQLITE_BUSY_MS = 30000     # a reader waits this long for a writer's checkpoint of the WAL
# How Spark fetches SQLite's columns (its JDBC reader's ``customSchema``). By default text arrives
# through getString, a Java String decoded from UTF-8 that Spark encodes back to UTF-8, and
# BIGINT through getBigDecimal (SQLite reports it unsigned, DECIMAL(20,0)) and a cast: a sixth
# of the read's CPU (measured). As bytes and longs, each value is one copy; the cast to the source's
# types then only wraps the bytes (SQLite keeps text as UTF-8).
SQLITE_FETCH_TYPES = ", ".join([*(f"`{name}` BINARY" for name in ("id", "topic", "key", "headers", "content_type",
                                                                    "body")),
                                "`partition` INT", "`offset` BIGINT", "`timestamp` BIGINT"])


class UnsupportedStore(JournalError):
    """The store's URL names a database the journal has no JDBC driver for."""


@dataclass(frozen=True)
class JdbcStore:
    """Where Spark's JDBC reader finds the store: its JDBC URL and connection properties."""

    url: str
    properties: dict[str, str]
    # Each task's rows as one UNION ALL arm per range (:func:`tagged_ranges_table`) rather than
    # one OR of the ranges: measured for SQLite only.
    union_ranges: bool = False


def jdbc_store(store_url: str) -> JdbcStore:
    """The JDBC twin of a SQLAlchemy store URL (``sqlite``, ``postgresql``, ``mysql``/``mariadb``).

    Raises:
        UnsupportedStore: any other scheme (``memory://`` never reaches here: the job refuses it).
    """
    url = make_url(store_url)
    backend = url.get_backend_name()
    props = {"fetchsize": str(FETCH_ROWS)}
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise UnsupportedStore(f"the journal cannot read the in-memory SQLite store {store_url!r}")
        # Spark's tasks may run in other working folders (a cluster's executors): an absolute path.
        path = os.path.abspath(url.database)
        return JdbcStore(f"jdbc:sqlite:{path}", {**props, "driver": "org.sqlite.JDBC",
                                                  "busy_timeout": str(SQLITE_BUSY_MS),
                                                  "customSchema": SQLITE_FETCH_TYPES}, union_ranges=True)
    auth = {k: v for k, v in (("user", url.username), ("password", url.password)) if v}
    where = f"//{url.host or '127.0.0.1'}{f':{url.port}' if url.port else ''}/{url.database or ''}"
    if backend == "postgresql":
        return JdbcStore(f"jdbc:postgresql:{where}", {**props, **auth, "driver": "org.postgresql.Driver"})
    if backend in ("mysql", "mariadb"):
        # ANSI_QUOTES: the predicates quote names as the store's own SQL does ("offset", "partition").
        return JdbcStore(f"jdbc:mariadb:{where}?sessionVariables=sql_mode=ANSI_QUOTES",
                         {**props, **auth, "driver": "org.mariadb.jdbc.Driver"})
    raise UnsupportedStore(f"the journal reads sqlite, postgresql and mysql/mariadb stores, not {backend!r}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def tagged_ranges_table(groups: Sequence[Sequence[Range]]) -> str:
    """The rows of ``groups`` as a subquery: one ``UNION ALL`` arm per range, tagged with its group's
    index in ``TASK_COLUMN``, so that the predicate ``TASK_COLUMN = k`` selects task k's rows.

    Why: with the ranges OR-ed in one WHERE, SQLite reads each range by the primary key's index and
    also records every row in a set to drop duplicates between the OR's terms; the ranges never
    overlap, and one arm per range skips that set. SQLite pushes ``TASK_COLUMN = k`` into each arm, and
    an arm of another task is a constant false it does not read (task CPU of the read, 300,000 rows,
    two tasks: 0.32 µs a row less, 9% of the read; README).
    """
    columns = ", ".join(f'"{name}"' for name in COLUMNS)
    arms = [f"SELECT {k} AS {TASK_COLUMN}, {columns} FROM {TABLE} WHERE {range_predicate([r])}"
            for k, group in enumerate(groups) for r in group]
    return f"({' UNION ALL '.join(arms)}) AS toymb_batch"


def range_predicate(ranges: Sequence[Range]) -> str:
    """The SQL condition selecting exactly the rows of ``ranges`` (the store's primary key order)."""
    return " OR ".join(f'(topic = {_literal(t)} AND "partition" = {int(p)} '
                       f'AND "offset" >= {int(lo)} AND "offset" < {int(hi)})' for t, p, lo, hi in ranges)


def read_ranges_jdbc(spark: Any, store: JdbcStore, groups: Sequence[Sequence[Range]], *,
                     ordered: bool = False) -> Any:
    """A DataFrame of ``SPARK_SCHEMA`` holding the rows of ``groups``, one Spark task per group.

    ``ordered`` sorts each task's rows by (topic, partition, offset), the order a bridge sends in.
    """
    groups = [g for g in groups if g]
    if store.union_ranges and 0 < sum(len(g) for g in groups) <= MAX_UNION_ARMS:
        table, predicates = tagged_ranges_table(groups), [f"{TASK_COLUMN} = {k}" for k in range(len(groups))]
    else:
        table, predicates = TABLE, [range_predicate(g) for g in groups] or ["1 = 0"]
    raw = spark.read.jdbc(store.url, table, predicates=predicates, properties=store.properties)
    # The drivers type columns their own way (SQLite's are fetched as SQLITE_FETCH_TYPES).
    typed = as_spark_schema(raw)
    return typed.sortWithinPartitions("topic", "partition", "offset") if ordered else typed


def logged_offsets(query_checkpoint: Path, batch_id: int) -> Offsets:
    """Our source's end offsets of ``batch_id`` in Spark's offset log, written before the batch runs.

    An entry's lines are "v1", the batch's metadata, then each source's offset (we have one).
    """
    lines = (query_checkpoint / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
    offsets: Offsets = json.loads(lines[2])
    return offsets


def batch_offsets(query_checkpoint: Path, batch_id: int) -> tuple[Offsets, Offsets]:
    """(start, end) offsets of ``batch_id`` of the query checkpointed at ``query_checkpoint``.

    Raises:
        JournalError: the offset log or the initial offset is missing (not a checkpoint of ours).
    """
    try:
        end = logged_offsets(query_checkpoint, batch_id)
        if batch_id > 0:
            start = logged_offsets(query_checkpoint, batch_id - 1)
        else:
            start = json.loads((query_checkpoint / INITIAL_OFFSET_FILE).read_text(encoding="utf-8"))
    except (OSError, IndexError, ValueError) as exc:
        raise JournalError(f"cannot find the offsets of batch {batch_id} in {query_checkpoint}: {exc}") from None
    return start, end


class BatchReader:
    """Reads micro-batches of one query by id, from its offset log, in the JVM."""

    def __init__(self, spark: Any, store_url: str, query_checkpoint: Path, *, tasks: int,
                 ordered: bool = False) -> None:
        self.spark = spark
        self.store = jdbc_store(store_url)
        self.query_checkpoint = query_checkpoint
        self.tasks = max(1, tasks)
        self.ordered = ordered

    def ranges(self, batch_id: int) -> list[list[Range]]:
        """The offset ranges of ``batch_id``, grouped into at most ``tasks`` Spark tasks."""
        start, end = batch_offsets(self.query_checkpoint, batch_id)
        return plan_ranges(start, end, self.tasks)

    def read(self, batch_id: int) -> Any:
        """The rows of ``batch_id`` as a DataFrame of ``SPARK_SCHEMA``."""
        return read_ranges_jdbc(self.spark, self.store, self.ranges(batch_id), ordered=self.ordered)
