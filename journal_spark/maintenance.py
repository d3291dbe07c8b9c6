"""Retention and compaction of the journal table, with Delta's own operations (through delta-rs).

``toymb journal compact`` deletes the days older than ``--keep-days`` (a ``DELETE`` on the
``date`` partition column: whole files are dropped, nothing is rewritten), compacts each day's
small files, one per micro-batch, into larger ones (``OPTIMIZE``), then removes the files that no
version newer than ``--vacuum-hours`` needs (``VACUUM``). Each is one Delta commit, safe while the
journal job appends: a compaction never conflicts with appends, and the application's
``txnAppId``/``txnVersion`` marks are part of the table's state, so they survive. Time travel
(``replay --as-of``) reaches back only as far as the vacuum leaves files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from .replay import open_table


@dataclass
class CompactResult:
    deleted_rows: int
    files_removed: int
    files_added: int
    vacuumed: int


def compact(journal_dir: str | Path, *, keep_days: int | None = None, vacuum_hours: int = 168,
            today: dt.date | None = None) -> CompactResult:
    """Delete days older than ``keep_days`` (None keeps all), compact, and vacuum the journal table.

    Raises:
        ReplayError: there is no journal table at ``journal_dir``.
    """
    table = open_table(journal_dir)
    deleted = 0
    if keep_days is not None:
        first_kept = (today or dt.datetime.now(dt.UTC).date()) - dt.timedelta(days=keep_days)
        metrics = table.delete(f"date < '{first_kept.isoformat()}'")
        deleted = int(metrics.get("num_deleted_rows") or 0)
    optimized = table.optimize.compact()
    vacuumed = table.vacuum(retention_hours=vacuum_hours, dry_run=False, enforce_retention_duration=False)
    return CompactResult(deleted, int(optimized.get("numFilesRemoved", 0)), int(optimized.get("numFilesAdded", 0)),
                         len(vacuumed))
