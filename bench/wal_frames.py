"""WAL pages a commit writes: the node's own tables and write path against the SQLite ceiling's table.

    python -m bench.wal_frames [rows_per_commit] [partitions]

A batched publish's commit is about a third of its cycle, mostly one ``fdatasync`` of what the
commit appended to the write-ahead log; on a shared disk its time is too noisy to compare two
layouts, the number of pages is not. The node's rows go through :class:`~broker.store.sql.Store`'s
own writer (``append_transaction``: the topics' lock, the rows, the partitions' ends); the ceiling's
through ``bench.ceilings``' table and statement. Nothing checkpoints during a run, so the log only
grows: its growth over the commits is what they wrote.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import ceilings
from broker.envelope import NewMessage
from broker.partitioning import partition_for
from broker.store.checkpoint import WalCheckpointer, background_pragmas
from broker.store.sql import Store

COMMITS = 200
BODY = b"x" * 256
_FRAME_HEADER = 24   # bytes before each page in the log
_WAL_HEADER = 32


def _frames(wal: Path, page_size: int, before: int) -> float:
    """Pages appended to ``wal`` since it was ``before`` bytes long."""
    return (os.path.getsize(wal) - before) / (page_size + _FRAME_HEADER)


def node_frames(rows: int, partitions: int, commits: int = COMMITS) -> float:
    """WAL pages a commit (over ``commits``) of the node's writer, ``rows`` messages keyed ``k0``..``k99`` (the
    publish bench's batches) into a topic of ``partitions``."""
    folder = Path(tempfile.mkdtemp(prefix="toymb-frames-"))
    path = folder / "toymb.db"
    # Never due during a run: the log must only grow.
    checkpointer = WalCheckpointer(str(path), interval_s=3600, checkpoint_bytes=1 << 40,
                                   restart_bytes=1 << 40, cap_bytes=1 << 40, max_delay_s=3600)
    store = Store(f"sqlite:///{path}", checkpointer=checkpointer)
    try:
        store.create_schema()
        topic, _ = store.ensure_topic("bench", partitions)
        ends: dict[int, int] = {}
        before = os.path.getsize(f"{path}-wal")
        for _ in range(commits):
            with store.append_transaction() as txn:
                txn.lock_topics([topic.name], 1000)
                batch, moved = [], {}
                for i in range(rows):
                    key = f"k{i % 100}"
                    partition = partition_for(key, partitions)
                    offset = ends.get(partition, 0)
                    ends[partition] = moved[(topic.name, partition)] = offset + 1
                    message = NewMessage(os.urandom(16).hex(), key, {}, "text/plain", BODY, int(time.time() * 1000),
                                         given_id=False)
                    batch.append(txn.row(topic.name, partition, offset, message))
                txn.write(batch, {}, [])
                txn.write([], moved, [])
        return _frames(Path(f"{path}-wal"), 4096, before) / commits
    finally:
        store.dispose()
        checkpointer.stop()
        shutil.rmtree(folder, ignore_errors=True)


def ceiling_frames(rows: int, commits: int = COMMITS) -> float:
    """WAL pages a commit (over ``commits``) of ``rows`` rows into the SQLite ceiling's table, as ``bench.ceilings``
    writes them (100 partitions)."""
    folder = Path(tempfile.mkdtemp(prefix="toymb-frames-"))
    try:
        conn = sqlite3.connect(folder / "raw.db")
        conn.execute("PRAGMA journal_mode=WAL")
        background_pragmas(conn)
        conn.execute(ceilings.BARE_TABLE.format(blob="BLOB"))
        conn.commit()
        data: list[tuple[Any, ...]] = ceilings._rows(rows * commits, BODY)
        insert = ceilings.INSERT.format(marks=",".join("?" * 9))
        before = os.path.getsize(folder / "raw.db-wal")
        for start in range(0, len(data), rows):
            conn.executemany(insert, data[start:start + rows])
            conn.commit()
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        frames = _frames(folder / "raw.db-wal", page_size, before)   # before close() removes the log
        conn.close()
        return frames / commits
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> None:
    rows = int(argv[0]) if argv else 389
    partitions = int(argv[1]) if len(argv) > 1 else 100
    print(f"node, {rows} rows a commit, topic of {partitions} partitions: {node_frames(rows, partitions):.1f} "
          "WAL pages a commit")
    print(f"ceiling, {rows} rows a commit: {ceiling_frames(rows):.1f} WAL pages a commit")


if __name__ == "__main__":
    main(sys.argv[1:])
