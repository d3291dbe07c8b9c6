"""The journal's table sink: a Delta Lake table, written exactly once per micro-batch.

Layout: one Delta table at the journal folder, partitioned by ``topic`` and ``date``
(``yyyy-MM-dd`` of the message's timestamp, UTC). Any Delta reader (Spark, the ``deltalake``
package, DuckDB) sees exactly the committed batches: a batch's files become visible in one atomic
commit of the table's log, whatever store the table lives on.

Exactly once. Spark re-runs a micro-batch after a crash with the same batch id and the same rows.
Every write carries Delta's own idempotence marks, ``txnAppId`` (this checkpoint's application id)
and ``txnVersion``; Delta skips a write whose version is not above the last one committed for the
application, in the same atomic commit that would add the files.

Fencing. ``txnVersion`` is ``epoch << 32 | batch_id``, where ``epoch`` is the fencing token of the
lease this process holds (see ``lease``). A standby that takes over gets a higher epoch, so any
write of a paused former leader carries a lower version and Delta refuses it, atomically. Before
writing, the sink reads the last committed version: a batch already committed under any epoch is
skipped (so a takeover re-running the last batch writes it once), and a higher epoch than ours
means we were fenced. After writing, it checks that the commit is its own.

After the commit the sink records the batch's end offsets (from the query's own offset log) in
``toymb_journal_offsets``, for retention and the lag, only ever moving them forward.

Per-batch cost. Delta looks ``txnAppId`` up in the table's state, which it computes with a Spark
job once per table version: about half of a small batch's time. Right after its commit, the sink
has Delta compute the new version's state in the background, while Spark records the batch, plans
the next one and reads its rows; the next write finds it computed (:meth:`DeltaSink._warm_state`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.store import JournalRepository

from .errors import JournalError

log = logging.getLogger(__name__)

EPOCH_SHIFT = 32
# Per-batch cost: only these columns get min/max statistics in the log (others are never filtered on).
STATS_COLUMNS = "partition,offset,timestamp"
# The ``date`` partition column, as SQL text: one call into the JVM per batch rather than four.
DATE_SQL = "date_format(timestamp_millis(`timestamp`), 'yyyy-MM-dd')"


class Fenced(JournalError):
    """Another journal process holds the lease now: this one must not commit."""


def txn_version(epoch: int, batch_id: int) -> int:
    """The ``txnVersion`` of ``batch_id`` written under lease ``epoch``."""
    return (epoch << EPOCH_SHIFT) | batch_id


def split_version(version: int) -> tuple[int, int]:
    """(epoch, batch id) of a ``txnVersion``."""
    return version >> EPOCH_SHIFT, version & ((1 << EPOCH_SHIFT) - 1)


def batch_end_offsets(query_checkpoint: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """The source's end offsets of ``batch_id``, per (topic, partition), from Spark's offset log."""
    from .batch_rows import logged_offsets

    return {(t, p): n for t, parts in logged_offsets(query_checkpoint, batch_id).items() for p, n in enumerate(parts)}


def warm_state(spark: Any, table: Path) -> threading.Thread:
    """Have Delta compute ``table``'s latest state (and its ``txnAppId`` versions) in a background thread.

    ``DESCRIBE DETAIL`` counts the table's files, which needs the state Delta caches per table
    version; the next write's idempotence check then finds it computed. Nothing depends on it
    finishing: a failure (the JVM stopping, say) only means the next write computes it itself.
    """
    path = str(table).replace("`", "``")

    def warm() -> None:
        try:
            spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()
        except Exception as exc:  # noqa: BLE001 - an optimisation only
            log.debug("warming the table's state failed: %s", str(exc).splitlines()[:1])

    thread = threading.Thread(target=warm, name="toymb-delta-state", daemon=True)
    thread.start()
    return thread


class DeltaSink:
    """Writes micro-batches to the Delta journal table, once per batch id, fenced by a lease epoch."""

    name = "table"
    start = "journaled"   # a fresh checkpoint resumes where the journal already is
    ordered = False       # Delta sorts each task's rows by its partition columns itself

    def __init__(self, table_dir: str | Path, checkpoint_dir: str | Path, store: JournalRepository | None,
                 epoch: Callable[[], int] = lambda: 0,
                 on_batch: Callable[[int, int, bool], None] | None = None) -> None:
        self.table = Path(table_dir).resolve()
        self.query_checkpoint = Path(checkpoint_dir).resolve() / self.name
        self.store = store
        self.epoch = epoch
        self.on_batch = on_batch
        state = Path(checkpoint_dir).resolve() / f"{self.name}.sink"
        state.mkdir(parents=True, exist_ok=True)
        app_file = state / "app_id"
        if not app_file.exists():
            # One id per checkpoint: a new checkpoint numbers its batches from 0 again.
            tmp = state / f".app_id.{uuid.uuid4().hex[:8]}"
            tmp.write_text(f"toymb-journal-{uuid.uuid4().hex}", encoding="utf-8")
            try:
                tmp.rename(app_file) if not app_file.exists() else tmp.unlink()
            except OSError:
                tmp.unlink(missing_ok=True)
        self.app_id = app_file.read_text(encoding="utf-8").strip()
        self._log: Any = None
        self._warming: threading.Thread | None = None

    def _delta_log(self) -> Any:
        """The table's log through delta-rs, brought up to date (reads only the new commits)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if self._log is None:
            try:
                self._log = DeltaTable(str(self.table))
            except TableNotFoundError:
                return None   # no commit yet (a first batch may have died after creating _delta_log/)
        else:
            self._log.update_incremental()
        return self._log

    def committed_version(self) -> int | None:
        """The last ``txnVersion`` committed for this checkpoint's application, if any."""
        table = self._delta_log()
        if table is None:
            return None
        version = table.transaction_version(self.app_id)
        return None if version is None else int(version)

    def write_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch callback: make ``df`` durable in the table once for ``batch_id``.

        Raises:
            Fenced: a newer lease epoch has committed to the table.
        """
        from pyspark.sql import functions as F

        started = time.perf_counter()
        epoch = self.epoch()
        last = self.committed_version()
        if last is not None:
            last_epoch, last_batch = split_version(last)
            if last_epoch > epoch:
                raise Fenced(f"the journal table was committed under lease epoch {last_epoch}, "
                             f"above ours ({epoch}): another journal process took over")
            if last_batch >= batch_id:
                log.info("batch %d already in the table (as of batch %d, epoch %d); skipping the re-run",
                         batch_id, last_batch, last_epoch)
                self._record(batch_id)
                if self.on_batch:
                    self.on_batch(0, batch_id, True)
                return
        version = txn_version(epoch, batch_id)
        dated = df.withColumn("date", F.expr(DATE_SQL))
        (dated.write.format("delta").mode("append").partitionBy("topic", "date")
         .option("txnAppId", self.app_id).option("txnVersion", str(version))
         .save(str(self.table)))
        now = self.committed_version()
        if now != version:
            raise Fenced(f"batch {batch_id} was not committed under epoch {epoch}: the table's last "
                         f"version for this journal is {now} (another journal process took over)")
        self._warm_state(df.sparkSession)
        rows = self._last_commit_rows()
        self._record(batch_id)
        log.info("batch %d: %d rows into the table in %.2fs", batch_id, rows, time.perf_counter() - started)
        if self.on_batch:
            self.on_batch(rows, batch_id, False)

    def _warm_state(self, spark: Any) -> None:
        """Start :func:`warm_state` for the table, unless the previous one is still at work."""
        if self._warming is None or not self._warming.is_alive():
            self._warming = warm_state(spark, self.table)

    def settle(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the background state job (before Spark stops)."""
        if self._warming is not None:
            self._warming.join(timeout)

    def _last_commit_rows(self) -> int:
        try:
            metrics = self._log.history(1)[0].get("operationMetrics") or {}
            return int(metrics.get("numOutputRows", 0))
        except Exception:  # noqa: BLE001 - a count for logs and metrics only
            return 0

    def _record(self, batch_id: int) -> None:
        """Record the batch's end offsets in the store, if any."""
        if self.store is not None:
            self.store.record_journaled(batch_end_offsets(self.query_checkpoint, batch_id))
