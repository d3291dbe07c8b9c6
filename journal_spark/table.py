"""The journal's table sink: a Delta Lake table, written exactly once per micro-batch.

Layout: one Delta table at the journal folder, partitioned by ``topic`` and ``date``
(``yyyy-MM-dd`` of the message's timestamp, UTC). Any Delta reader (Spark, the ``deltalake``
package, DuckDB) sees exactly the committed batches: a batch's files become visible in one atomic
commit of the table's log, whatever store the table lives on.

Exactly once. Spark re-runs a micro-batch after a crash with the same batch id and the same rows.
Every commit carries Delta's own idempotence marks, ``txnAppId`` (this checkpoint's application
id) and ``txnVersion``, in the same atomic commit as the batch's files. Before writing, the sink
reads the application's last version in the log, at the transaction's read version or later, and
skips a batch at or below it; a commit of the same application after that read version makes
Delta's conflict checker refuse ours.

Fencing. ``txnVersion`` is ``epoch << 32 | batch_id``, where ``epoch`` is the fencing token of the
lease this process holds (see ``lease``). A standby that takes over gets a higher epoch, so any
write of a paused former leader carries a lower version and is refused: by the check before
writing, or, when the successor commits in between, by Delta's conflict checker. That check reads
the last committed version: a batch already committed under any epoch is
skipped (so a takeover re-running the last batch writes it once), and a higher epoch than ours
means we were fenced. After writing, it checks that the commit is its own.

After the commit the sink records the batch's end offsets (from the query's own offset log) in
``toymb_journal_offsets``, for retention and the lag, only ever moving them forward.

Per-batch cost. Delta's DataFrame writer looks ``txnAppId`` up in the table's fully computed
state, a Spark job once per table version: three quarters of a small commit's CPU. Appends to an
existing table therefore go through Delta's transaction API (:mod:`.delta_commit`): the same files
and the same ``SetTransaction`` in one atomic commit, with the application id in the
transaction's read set so that Delta's conflict checker still refuses a racing commit of the same
application. The lookup is the sink's own check above, through delta-rs, at a log version not
below the transaction's. The table's first commit (which creates it) uses the DataFrame writer.

Log checkpoints. A Delta writer checkpoints the log inside the commit whose version is a multiple
of the table's ``delta.checkpointInterval``, rebuilding the table's state with Spark jobs first:
one batch in 50 took 1.4 to 3.6 s, and the next one as long again. The journal's tables set that
interval out of reach (``COMMIT_CHECKPOINT_INTERVAL``), and the sink writes the checkpoint itself
off the commit path: after a commit that crosses a multiple of ``checkpoint_every`` versions, a
background thread has delta-rs checkpoint that version (about 0.1 s of its own, in Rust, while
the next batch runs). A checkpoint is derived from committed versions only, so one that dies
half-way, or one a fenced leader writes, changes nothing a reader sees.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.store import JournalRepository

from .delta_commit import Append
from .errors import JournalError
from .schema import PARTITION_COLUMNS

log = logging.getLogger(__name__)

EPOCH_SHIFT = 32
# Per-batch cost: only these columns get min/max statistics in the log (others are never filtered on).
STATS_COLUMNS = "partition,offset,timestamp"
# The ``date`` partition column, as SQL text: one call into the JVM per batch rather than four.
DATE_SQL = "date_format(timestamp_millis(`timestamp`), 'yyyy-MM-dd')"
# The journal table's ``delta.checkpointInterval``: no commit reaches a multiple of it, so no
# writer (Spark's or delta-rs's) checkpoints inside a commit; the sink does, off the commit path.
COMMIT_CHECKPOINT_INTERVAL = "1000000000"
CHECKPOINT_EVERY = 50   # versions between the sink's log checkpoints (Delta's default is 10)


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


class DeltaSink:
    """Writes micro-batches to the Delta journal table, once per batch id, fenced by a lease epoch."""

    name = "table"
    start = "journaled"   # a fresh checkpoint resumes where the journal already is
    ordered = False       # Delta sorts each task's rows by its partition columns itself

    def __init__(self, table_dir: str | Path, checkpoint_dir: str | Path, store: JournalRepository | None,
                 epoch: Callable[[], int] = lambda: 0,
                 on_batch: Callable[[int, int, bool], None] | None = None,
                 checkpoint_every: int = CHECKPOINT_EVERY) -> None:
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
        self.checkpoint_every = max(1, checkpoint_every)
        self._checkpointer: threading.Thread | None = None
        self._checkpointed: int | None = None   # the last checkpoint's version, once read

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

    def committed_version(self, at_least: int = -1) -> int | None:
        """The last ``txnVersion`` committed for this checkpoint's application, if any.

        Read from the log at table version ``at_least`` or later.

        Raises:
            JournalError: the log does not reach table version ``at_least``.
        """
        table = self._delta_log()
        if table is None:
            if at_least >= 0:
                raise JournalError(f"the journal table at {self.table} has no log, but Delta read version {at_least}")
            return None
        if table.version() < at_least:
            table.update_incremental()
            if table.version() < at_least:
                raise JournalError(f"the journal table's log at {self.table} stops at version {table.version()}, "
                                   f"before Delta's read version {at_least}")
        version = table.transaction_version(self.app_id)
        return None if version is None else int(version)

    def close(self) -> None:
        """Nothing to release: the table is written through Spark, which the job stops."""

    def write_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch callback: make ``df`` durable in the table once for ``batch_id``.

        Raises:
            Fenced: a newer lease epoch has committed to the table.
        """
        from pyspark.sql import functions as F

        started = time.perf_counter()
        epoch = self.epoch()
        # An existing table: a transaction first, then the check at its read version or later.
        append = Append(df.sparkSession, str(self.table), self.app_id) if self._delta_log() is not None else None
        last = self.committed_version(at_least=append.read_version if append is not None else -1)
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
        if append is not None and append.table_schema() == dated._jdf.schema().simpleString():
            append.commit(dated, version, PARTITION_COLUMNS)
        else:
            # The first commit creates the table (schema, partitioning, properties); a table of
            # other columns gets Delta's writer, which enforces the table's schema.
            (dated.write.format("delta").mode("append").partitionBy(*PARTITION_COLUMNS)
             .option("txnAppId", self.app_id).option("txnVersion", str(version))
             .save(str(self.table)))
        now = self.committed_version()
        if now != version:
            raise Fenced(f"batch {batch_id} was not committed under epoch {epoch}: the table's last "
                         f"version for this journal is {now} (another journal process took over)")
        rows = self._last_commit_rows()
        self._record(batch_id)
        self._checkpoint_if_due()
        log.info("batch %d: %d rows into the table in %.2fs", batch_id, rows, time.perf_counter() - started)
        if self.on_batch:
            self.on_batch(rows, batch_id, False)

    def _last_commit_rows(self) -> int:
        try:
            metrics = self._log.history(1)[0].get("operationMetrics") or {}
            return int(metrics.get("numOutputRows", 0))
        except Exception:  # noqa: BLE001 - a count for logs and metrics only
            return 0

    def _checkpoint_if_due(self) -> None:
        """Checkpoint the log in the background once ``checkpoint_every`` versions passed since the last one.

        Only for a table whose own interval is out of reach: a table created with Delta's
        in-commit checkpoints (before this version) keeps them, and two writers of the same
        checkpoint file are never wanted.
        """
        if self._checkpointer is not None and self._checkpointer.is_alive():
            return
        version = int(self._log.version())
        if self._checkpointed is None:
            self._checkpointed = _last_checkpoint_version(self.table)
        if version // self.checkpoint_every <= max(0, self._checkpointed) // self.checkpoint_every:
            return
        interval = self._log.metadata().configuration.get("delta.checkpointInterval")
        if interval is None or int(interval) <= self.checkpoint_every:
            return
        self._checkpointer = threading.Thread(target=self._checkpoint, args=(version,), daemon=True,
                                              name="journal-checkpoint")
        self._checkpointer.start()

    def _checkpoint(self, version: int) -> None:
        from deltalake import DeltaTable

        started = time.perf_counter()
        try:
            DeltaTable(str(self.table), version=version).create_checkpoint()
        except Exception as exc:  # noqa: BLE001 - a checkpoint only speeds reads up; the next crossing retries
            log.warning("checkpoint of the journal table at version %d failed: %s", version, exc)
            return
        self._checkpointed = version
        log.info("journal table checkpointed at version %d in %.2fs", version, time.perf_counter() - started)

    def wait_for_checkpoint(self, timeout: float | None = None) -> None:
        """Wait until the background checkpoint, if one is running, is done (tests, orderly stops)."""
        if self._checkpointer is not None:
            self._checkpointer.join(timeout)

    def _record(self, batch_id: int) -> None:
        """Record the batch's end offsets in the store, if any."""
        if self.store is not None:
            self.store.record_journaled(batch_end_offsets(self.query_checkpoint, batch_id))


def _last_checkpoint_version(table: Path) -> int:
    """The version of the table's last log checkpoint (``_delta_log/_last_checkpoint``), or -1."""
    try:
        return int(json.loads((table / "_delta_log" / "_last_checkpoint").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1
