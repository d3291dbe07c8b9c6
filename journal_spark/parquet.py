"""The Parquet journal sink: exactly once per micro-batch, whatever point a crash hits.

Spark re-runs a micro-batch after a crash with the same batch id and the same offsets (so the same
rows, see ``source``). This sink makes a batch's effect happen once, in four steps:

1. Spark writes the batch into a staging folder ``<journal>/_staging/<run>-<batch>/``.
2. A *pending* manifest listing the final file names (derived from run and batch id only) and the
   offsets the batch reaches is written atomically under ``<checkpoint>/<sink>.sink/pending/``.
3. The staged files are renamed into ``<journal>/topic=<t>/date=<d>/part-<run>-<batch>-<n>.parquet``.
4. The manifest is atomically renamed to ``commits/<batch>.json``: the batch is done.

On a re-run: a committed batch is skipped (its offsets are recorded again, harmlessly); a pending
one first deletes every file its manifest names, then starts over. A crash therefore leaves each
row at most once at every moment, and exactly once after the re-run. The journal and the staging
folder must be on one filesystem (rename is atomic there); readers skip ``_``-prefixed folders.

After the commit the sink records the offsets in ``toymb_journal_offsets`` (used by retention
and for the lag), only ever moving them forward.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from broker.store import JournalRepository

log = logging.getLogger(__name__)

KEEP_COMMITS = 100      # Spark only ever re-runs its latest batches; older markers are pruned


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to ``path`` so that a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, separators=(",", ":"))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ParquetSink:
    """Writes micro-batches to the Parquet journal, exactly once per batch id."""

    name = "parquet"
    start = "journaled"   # a fresh checkpoint resumes where the journal already is

    def __init__(self, journal_dir: str | Path, state_dir: str | Path, store: JournalRepository | None,
                 on_batch: Callable[[int, int, bool], None] | None = None) -> None:
        self.journal = Path(journal_dir).resolve()
        self.state = Path(state_dir).resolve()
        self.store = store
        self.on_batch = on_batch
        for folder in (self.journal / "_staging", self.state / "pending", self.state / "commits"):
            folder.mkdir(parents=True, exist_ok=True)
        run_file = self.state / "run_id"
        if not run_file.exists():
            # Sortable (creation time), so replay can order files of successive checkpoints.
            run_file.write_text(f"{int(time.time() * 1000):013d}", encoding="utf-8")
        self.run_id = run_file.read_text(encoding="utf-8").strip()

    # -- paths --------------------------------------------------------------------------------

    def _commit_path(self, batch_id: int) -> Path:
        return self.state / "commits" / f"{batch_id:012d}.json"

    def _pending_path(self, batch_id: int) -> Path:
        return self.state / "pending" / f"{batch_id:012d}.json"

    def _staging(self, batch_id: int) -> Path:
        return self.journal / "_staging" / f"{self.run_id}-{batch_id:012d}"

    # -- the sink -----------------------------------------------------------------------------

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """foreachBatch callback: make ``df`` durable in the journal once for ``batch_id``."""
        started = time.perf_counter()
        committed = self._commit_path(batch_id)
        if committed.exists():
            manifest = json.loads(committed.read_text(encoding="utf-8"))
            log.info("batch %d already journaled (%d rows); skipping the re-run", batch_id, manifest["rows"])
            self._record(manifest["offsets"])
            if self.on_batch:
                self.on_batch(0, batch_id, True)
            return
        self.undo_pending(batch_id)
        staging = self._staging(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        dated = df.withColumn("date", F.date_format(F.timestamp_millis(F.col("timestamp")), "yyyy-MM-dd"))
        dated.write.mode("overwrite").partitionBy("topic", "date").parquet(str(staging))
        manifest = self.stage_manifest(batch_id, staging)
        self.publish(batch_id, staging, manifest)
        self._record(manifest["offsets"])
        self._prune(batch_id)
        log.info("batch %d: %d rows journaled in %.2fs", batch_id, manifest["rows"],
                 time.perf_counter() - started)
        if self.on_batch:
            self.on_batch(int(manifest["rows"]), batch_id, False)

    def stage_manifest(self, batch_id: int, staging: Path) -> dict[str, Any]:
        """Final names and reached offsets of the files Spark staged for ``batch_id``."""
        moves: list[list[str]] = []
        offsets: dict[str, dict[str, int]] = {}
        rows = 0
        staged = sorted(staging.glob("topic=*/date=*/*.parquet"))
        for n, source in enumerate(staged):
            topic = source.parent.parent.name.split("=", 1)[1]
            target = (self.journal / source.parent.parent.name / source.parent.name
                      / f"part-{self.run_id}-{batch_id:012d}-{n:05d}.parquet")
            moves.append([str(source.relative_to(self.journal)), str(target.relative_to(self.journal))])
            table = pq.read_table(source, columns=["partition", "offset"])
            rows += table.num_rows
            if table.num_rows == 0:
                continue
            grouped = table.group_by("partition").aggregate([("offset", "max")])
            reached = offsets.setdefault(topic, {})
            pairs = zip(grouped["partition"].to_pylist(), grouped["offset_max"].to_pylist(), strict=True)
            for p, last in pairs:
                reached[str(p)] = max(reached.get(str(p), 0), int(last) + 1)
        return {"batch": batch_id, "run": self.run_id, "rows": rows, "moves": moves, "offsets": offsets}

    def publish(self, batch_id: int, staging: Path, manifest: dict[str, Any]) -> None:
        """Steps 2 to 4: pending manifest, renames, commit."""
        pending = self._pending_path(batch_id)
        write_atomically(pending, manifest)
        for source, target in manifest["moves"]:
            destination = self.journal / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.journal / source, destination)
        os.replace(pending, self._commit_path(batch_id))
        shutil.rmtree(staging, ignore_errors=True)

    def undo_pending(self, batch_id: int) -> None:
        """Remove what an interrupted earlier attempt of ``batch_id`` put in the journal."""
        pending = self._pending_path(batch_id)
        if not pending.exists():
            return
        manifest = json.loads(pending.read_text(encoding="utf-8"))
        removed = 0
        for _source, target in manifest["moves"]:
            try:
                (self.journal / target).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        pending.unlink()
        log.warning("batch %d was interrupted after staging; removed %d of its files before re-running",
                    batch_id, removed)

    def _record(self, offsets: Mapping[str, Mapping[str, int]]) -> None:
        """Record a manifest's offsets ({topic: {partition as text: next}}) in the store, if any."""
        if self.store is not None:
            self.store.record_journaled({(t, int(p)): int(n) for t, parts in offsets.items()
                                         for p, n in parts.items()})

    def _prune(self, batch_id: int) -> None:
        for folder in ("commits", "pending"):
            for path in (self.state / folder).glob("*.json"):
                try:
                    old = int(path.stem)
                except ValueError:
                    continue
                if old < batch_id - KEEP_COMMITS:
                    path.unlink(missing_ok=True)
