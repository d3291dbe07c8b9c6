"""SQLite's WAL checkpoint, taken off the commit path: a thread of its own keeps the log short.

By default SQLite checkpoints inside the commit that brings the write-ahead log past 1,000 pages:
that commit copies the log into the database file and syncs it before it returns, so about one
publish commit in sixteen waited ~7 ms more (the tail of push latency). A store that checkpoints
in the background turns that off on its own connections (``wal_autocheckpoint=0``,
:func:`background_pragmas`) and runs :class:`WalCheckpointer` instead: a connection and a thread
of their own that run a ``PASSIVE`` checkpoint every ``interval_s`` when something was committed.
A passive checkpoint takes no lock a writer waits for, and sqlite3 lets go of the GIL while it
copies and syncs, so its I/O overlaps the writer's.

The log starts over only when a write begins with every frame of it copied. A passive checkpoint
copies what was committed before it started; under steady writes more has been committed by its
end, so the log may never start over by itself. Once it is past ``restart_bytes`` the writer runs
a ``RESTART`` checkpoint between two commits, after answering the last one
(:meth:`WalCheckpointer.restart_if_due`, from :meth:`broker.store.sql.Store.maintain`): it copies
only the frames committed since the passive one, then the log starts over.

Durability is unchanged: commits still sync the log (``synchronous=FULL``), and a checkpoint syncs
the log before it copies and the database file before the log is reused (the checkpointer's
connection runs ``synchronous=FULL`` too).

The log stays bounded. A reader holding an old snapshot stops a checkpoint at that snapshot, and
the log cannot start over while the reader needs it. Past ``cap_bytes`` the writer's RESTART
checkpoint waits for readers, holding writes off, and is repeated until the log starts over:
publishes wait (and answer 503 after their timeout; nothing acknowledged is lost) instead of the
log filling the disk. After such a spike, the log file is cut back to ``limit_bytes``
(``journal_size_limit``) when it starts over.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Any

log = logging.getLogger(__name__)

# Every interval the checkpointer looks whether anything was committed and, if so, checkpoints.
# Measured at 5,000 msg/s of push-latency bench traffic (~60 pages a commit): see README.
DEFAULT_INTERVAL_S = 0.1
# Past this, a short RESTART checkpoint follows the passive one, so that the log starts over.
DEFAULT_RESTART_BYTES = 16 << 20
# Past this, checkpoints wait for readers and hold writers off until the log starts over.
DEFAULT_CAP_BYTES = 64 << 20
# A log grown past this (a spike, or a pinned reader) is cut back to it when it starts over.
DEFAULT_LIMIT_BYTES = DEFAULT_CAP_BYTES
# How long a RESTART checkpoint waits for the writer's lock and then for readers: briefly while the
# log is under its cap (a reader then only delays the restart), longer once past it.
_SOFT_WAIT_MS = 100
_PINNED_WAIT_MS = 1000
_PINNED_RETRY_S = 0.01
# The busy timeout of the store's connections (:func:`broker.store.sql.open_engine`), set back after a restart.
WRITER_BUSY_TIMEOUT_MS = 30000


def background_pragmas(cursor: Any, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
    """Settings of a connection whose store checkpoints in the background: its commits never
    checkpoint, and a log that grew past ``limit_bytes`` is cut back when it starts over."""
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.execute(f"PRAGMA journal_size_limit={int(limit_bytes)}")


class WalCheckpointer:
    """Checkpoints the write-ahead log of one SQLite file from a thread of its own.

    Start it before (or when) the first connection with :func:`background_pragmas` opens, stop
    it after the last one closed; ``start`` and ``stop`` may be called more than once.
    """

    def __init__(self, path: str, *, interval_s: float = DEFAULT_INTERVAL_S,
                 restart_bytes: int = DEFAULT_RESTART_BYTES, cap_bytes: int = DEFAULT_CAP_BYTES,
                 limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
        if interval_s <= 0 or restart_bytes <= 0 or cap_bytes < restart_bytes or limit_bytes < 0:
            raise ValueError("interval_s and restart_bytes must be positive, cap_bytes at least restart_bytes, "
                             "limit_bytes not negative")
        self.path = path
        self.interval_s = interval_s
        self.restart_bytes = restart_bytes
        self.cap_bytes = cap_bytes
        self.limit_bytes = limit_bytes
        self.checkpoints = 0      # passive checkpoints run
        self.restarts = 0         # checkpoints that waited for readers (the log was past its cap)
        self.log_pages = 0        # pages in the log at the last checkpoint
        self.peak_log_pages = 0
        self.pinned = 0           # restarts that found readers pinning the log past its cap
        # Set by the thread when a RESTART is due: how long the writer's one may wait for readers.
        self._due_wait_ms: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="toymb-wal-checkpoint", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=30)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")  # the checkpoint syncs the database before the log is reused
        background_pragmas(conn, self.limit_bytes)
        return conn

    def _run(self) -> None:
        conn = self._connect()
        try:
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            restart_pages = max(1, self.restart_bytes // page_size)
            cap_pages = max(1, self.cap_bytes // page_size)
            seen = None
            behind = False  # the last checkpoint stopped at a reader's snapshot: try again
            while not self._stop.wait(self.interval_s):
                try:
                    version = conn.execute("PRAGMA data_version").fetchone()[0]
                    if version == seen and not behind:
                        continue  # nothing committed since the last look
                    seen = version
                    behind = self.checkpoint(conn, restart_pages, cap_pages)
                except sqlite3.Error as exc:  # a locked or vanished file: try again at the next tick
                    log.warning("WAL checkpoint of %s failed: %s", self.path, exc)
                    behind = True
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection, restart_pages: int, cap_pages: int) -> bool:
        """One passive checkpoint on ``conn``; True when the log still holds frames not copied.

        A passive checkpoint copies what was committed up to its start, but a busy writer has
        committed more by its end, and the log starts over only when a write begins with every
        frame copied: under steady writes that may never happen. Past ``restart_pages`` a
        ``RESTART`` is due, which the writer runs between two commits (:meth:`restart_if_due`):
        it holds writes off only while it copies the few frames committed since. Only the writer
        does: without steady writes, the next write after a complete passive checkpoint starts
        the log over by itself.
        """
        busy, pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        if pages >= 0:  # -1: another connection was checkpointing
            self._saw(pages, restart_pages, cap_pages)
        return bool(busy) or copied < pages

    def restart_if_due(self, conn: Any) -> None:
        """Run the due ``RESTART`` checkpoint on ``conn`` (a writer's DBAPI connection, between
        two of its commits; see :meth:`checkpoint`). Past the cap it is repeated until readers
        let the log start over, holding writes off meanwhile: the log stays bounded."""
        wait_ms = self._due_wait_ms
        if wait_ms is None:
            return
        try:
            conn.execute(f"PRAGMA busy_timeout={wait_ms}")
            while True:
                self.restarts += 1
                busy, pages, _copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                if not busy:
                    self._due_wait_ms = None
                    return
                if wait_ms == _SOFT_WAIT_MS or self._stop.is_set():
                    return  # under the cap a reader only delays the restart: the next commit tries again
                if pages < 0:
                    # The checkpointer thread holds the checkpoint lock (a passive round): let it finish.
                    self._stop.wait(_PINNED_RETRY_S)
                    continue
                if self.pinned % 10 == 0:
                    log.warning("the WAL of %s holds %d pages, past its cap of %d bytes, pinned by a reader: "
                                "writes wait until it can start over", self.path, pages, self.cap_bytes)
                self.pinned += 1
        finally:
            conn.execute(f"PRAGMA busy_timeout={WRITER_BUSY_TIMEOUT_MS}")

    def _saw(self, pages: int, restart_pages: int, cap_pages: int) -> None:
        self.log_pages = pages
        self.peak_log_pages = max(self.peak_log_pages, pages)
        if pages > cap_pages:
            self._due_wait_ms = _PINNED_WAIT_MS
        elif pages > restart_pages:
            self._due_wait_ms = _SOFT_WAIT_MS
        else:
            self._due_wait_ms = None
