"""Physical ceilings the node is measured against, in the same run as the node.

A ceiling is what the bare part can do with nothing of ToyMB's design in the way:

* the storage engine: the same 256-byte rows into a table keyed only by (topic, partition,
  offset), with the node's durability and engine configuration (SQLite WAL with
  ``synchronous=FULL``, the WAL checkpointed in the background as the node does; PostgreSQL's own
  commit), 1,000 rows a commit. The node's other index (client-given ids) is a cost the node
  pays, so it is not in the ceiling;
* the HTTP server: a bare WSGI callable (no Flask) on the same server the node runs, with the
  same thread count, answering a small JSON body.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.common import free_port
from broker.store.checkpoint import WalCheckpointer, background_pragmas

BARE_TABLE = ('CREATE TABLE IF NOT EXISTS bare_messages (topic TEXT NOT NULL, "partition" INTEGER NOT NULL, '
              '"offset" BIGINT NOT NULL, id TEXT NOT NULL, key TEXT, headers TEXT NOT NULL, '
              'content_type TEXT NOT NULL, body {blob} NOT NULL, timestamp BIGINT NOT NULL, '
              'PRIMARY KEY (topic, "partition", "offset"))')
INSERT = ('INSERT INTO bare_messages (topic, "partition", "offset", id, key, headers, content_type, body, timestamp) '
          "VALUES ({marks})")
COMMIT_ROWS = 1000
# How the SQLite ceiling's engine runs: as the node's store (broker/store/checkpoint.py).
SQLITE_ENGINE = "WAL, synchronous=FULL, WAL checkpointed in the background as by the node"


def _rows(count: int, body: bytes) -> list[tuple[Any, ...]]:
    now = int(time.time() * 1000)
    return [("raw", i % 100, i // 100, uuid.uuid4().hex, f"k{i % 100}", "{}", "text/plain", body, now)
            for i in range(count)]


def sqlite_rows_per_s(rows: int, body: bytes, commit_rows: int = COMMIT_ROWS) -> float:
    """Bare ``executemany`` into the bare table: WAL, ``synchronous=FULL``, ``commit_rows`` a commit
    (1,000 for the ceiling).

    The engine is configured as the node's store is: its commits never checkpoint, a
    :class:`~broker.store.checkpoint.WalCheckpointer` does in the background (neither a ceiling
    slowed by SQLite's checkpoint inside commits while the node has it off, nor the reverse).
    """
    folder = Path(tempfile.mkdtemp(prefix="toymb-raw-"))
    checkpointer = WalCheckpointer(str(folder / "raw.db"))
    try:
        conn = sqlite3.connect(folder / "raw.db")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        background_pragmas(conn, checkpointer.limit_bytes)
        checkpointer.start()
        conn.execute(BARE_TABLE.format(blob="BLOB"))
        data = _rows(rows, body)
        insert = INSERT.format(marks=",".join("?" * 9))
        started = time.perf_counter()
        for start in range(0, rows, commit_rows):
            conn.executemany(insert, data[start:start + commit_rows])
            conn.commit()
            checkpointer.restart_if_due(conn)  # as the node's writer does between commits
        elapsed = time.perf_counter() - started
        conn.close()
        return rows / elapsed
    finally:
        checkpointer.stop()
        shutil.rmtree(folder, ignore_errors=True)


def postgres_rows_per_s(url: str, rows: int, body: bytes) -> dict[str, float]:
    """Bare ``executemany`` and ``COPY`` into the bare table on PostgreSQL, 1,000 rows a commit."""
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    data = _rows(rows, body)
    rates: dict[str, float] = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS bare_messages")
        conn.execute(BARE_TABLE.format(blob="BYTEA"))
        conn.commit()
        insert = INSERT.format(marks=",".join(["%s"] * 9))
        started = time.perf_counter()
        for start in range(0, rows, COMMIT_ROWS):
            with conn.cursor() as cur:
                cur.executemany(insert, data[start:start + COMMIT_ROWS])
            conn.commit()
        rates["executemany"] = rows / (time.perf_counter() - started)
        conn.execute("TRUNCATE bare_messages")
        conn.commit()
        started = time.perf_counter()
        for start in range(0, rows, COMMIT_ROWS):
            with conn.cursor() as cur, cur.copy('COPY bare_messages (topic, "partition", "offset", id, key, headers, '
                                               "content_type, body, timestamp) FROM STDIN") as copy:
                for row in data[start:start + COMMIT_ROWS]:
                    copy.write_row(row)
            conn.commit()
        rates["copy"] = rows / (time.perf_counter() - started)
        conn.execute("DROP TABLE bare_messages")
        conn.commit()
    return rates


class BareWsgiServer:
    """``bench.bare_wsgi`` in its own process: a bare WSGI app on the node's own HTTP server."""

    def __init__(self, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.bare_wsgi", str(self.port), str(threads)])

    def __enter__(self) -> BareWsgiServer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.url}/ready", timeout=1)
                return self
            except requests.RequestException:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the bare WSGI server did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
