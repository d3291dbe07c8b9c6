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
import os
import sqlite3
import struct
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

# Every interval the checkpointer reads how many frames of the log wait to be copied; it
# checkpoints once they are as many as SQLite's own checkpoint would take (1,000 pages of 4 KiB),
# or after the longest delay if fewer. One checkpoint every 100 ms instead synced the database file
# six times as often as SQLite does at 5,000 msg/s, each sync competing with the commits' own.
DEFAULT_INTERVAL_S = 0.05
DEFAULT_CHECKPOINT_BYTES = 4 << 20
DEFAULT_MAX_DELAY_S = 1.0
# Past this, the writer runs a short RESTART checkpoint between two commits, so that the log starts over.
DEFAULT_RESTART_BYTES = 16 << 20
# Past this (readers pin the log), the writer's RESTART waits for them, holding writes off, until the
# log starts over.
DEFAULT_CAP_BYTES = 64 << 20
# A log grown past this (a spike, or a pinned reader) is cut back to it when it starts over.
DEFAULT_LIMIT_BYTES = DEFAULT_CAP_BYTES
# How long a RESTART checkpoint waits for the writer's lock and then for readers: briefly while the
# log is under its cap (a reader then only delays the restart), longer once past it.
_SOFT_WAIT_MS = 100
_PINNED_WAIT_MS = 1000
_PINNED_RETRY_S = 0.01  # the pause when the checkpointer thread holds the checkpoint lock
# The busy timeout of the store's connections (:func:`broker.store.engines.open_engine`), set back after a restart.
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
                 checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES, max_delay_s: float = DEFAULT_MAX_DELAY_S,
                 restart_bytes: int = DEFAULT_RESTART_BYTES, cap_bytes: int = DEFAULT_CAP_BYTES,
                 limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
        if not 0 < interval_s <= max_delay_s or not 0 < checkpoint_bytes <= restart_bytes <= cap_bytes \
                or limit_bytes < 0:
            raise ValueError("need 0 < interval_s <= max_delay_s, 0 < checkpoint_bytes <= restart_bytes <= cap_bytes "
                             "and limit_bytes >= 0")
        self.path = path
        self.interval_s = interval_s
        self.checkpoint_bytes = checkpoint_bytes
        self.max_delay_s = max_delay_s
        self.restart_bytes = restart_bytes
        self.cap_bytes = cap_bytes
        self.limit_bytes = limit_bytes
        self.checkpoints = 0      # passive checkpoints run
        self.restarts = 0         # RESTART checkpoints the writer ran
        self.log_pages = 0        # pages in the log at the last checkpoint
        self.peak_log_pages = 0
        self.pinned = 0           # restarts that found readers pinning the log past its cap
        # Set by the thread when a RESTART is due: how long the writer's one may wait for readers.
        self._due_wait_ms: int | None = None
        self._index: int | None = None  # the wal-index file (-shm), read without SQLite
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
        with self._lock:
            index, self._index = self._index, None
        if index is not None:
            os.close(index)

    def _wal_index(self) -> int | None:
        """The ``-shm`` file, opened once it exists (by the thread or the writer, whichever asks first)."""
        if self._index is None:
            with self._lock:
                if self._index is None and not self._stop.is_set():
                    self._index = _open_wal_index(self.path)
        return self._index

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
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])  # opens the log and its index
            every_pages = max(1, self.checkpoint_bytes // page_size)
            restart_pages = max(1, self.restart_bytes // page_size)
            cap_pages = max(1, self.cap_bytes // page_size)
            seen = None
            behind = False  # the last checkpoint stopped at a reader's snapshot: try again
            last = time.monotonic()
            while not self._stop.wait(self.interval_s):
                try:
                    # Copy about as much at a time as SQLite's own checkpoint would: few checkpoints,
                    # each one sync of the database file. At least every max_delay_s, whatever the
                    # index says, whatever was committed since is copied too.
                    frames = _log_frames(self._wal_index())
                    due = frames is not None and frames[0] - frames[1] >= every_pages
                    if not due and time.monotonic() - last >= self.max_delay_s:
                        version = conn.execute("PRAGMA data_version").fetchone()[0]
                        due = version != seen or behind
                        seen = version
                    if due:
                        last = time.monotonic()
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
        wait_ms = self.restart_due()
        if wait_ms is not None:
            self.restart(conn, wait_ms)

    def restart_due(self) -> int | None:
        """The busy timeout (ms) of the ``RESTART`` checkpoint that is due, or None: none is.

        Cheap (one read of the wal-index), so the writer asks after every commit and takes a
        connection only when one is due."""
        frames = _log_frames(self._wal_index())
        if frames is not None and frames[0] * frames[2] > self.cap_bytes:
            # Past the cap, whatever the thread saw last: the bound must not wait for its next look.
            return _PINNED_WAIT_MS
        return self._due_wait_ms

    def restart(self, conn: Any, wait_ms: int) -> None:
        """Run a ``RESTART`` checkpoint on ``conn`` with a busy timeout of ``wait_ms`` (what
        :meth:`restart_due` said), repeated past the cap until it succeeds (see :meth:`restart_if_due`)."""
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


# The wal-index header in the ``-shm`` file (SQLite's WAL format, "the wal-index header"): two
# copies of 48 bytes, then the checkpoint information; native byte order. ``mxFrame`` (the last
# valid frame of the log) is at byte 16 of each copy, the page size at byte 14, ``nBackfill``
# (frames copied) at byte 96.
_HEADER = 48
_MX_FRAME = struct.Struct("=I")
_MX_FRAME_AT = 16
_PAGE_SIZE = struct.Struct("=H")  # szPage at byte 14; 1 stands for 65,536
_PAGE_SIZE_AT = 14
_BACKFILL_AT = 96


def _open_wal_index(path: str) -> int | None:
    try:
        return os.open(f"{path}-shm", os.O_RDONLY)
    except OSError:
        return None  # not there yet, or kept in memory: checkpoint every max_delay_s meanwhile


def _log_frames(shm: int | None) -> tuple[int, int, int] | None:
    """(frames in the log, frames copied into the database, page size), read from the wal-index
    without a lock; None when it cannot be read or was caught mid-update (the two header copies differ)."""
    if shm is None:
        return None
    try:
        raw = os.pread(shm, _BACKFILL_AT + 4, 0)
    except OSError:
        return None
    if len(raw) < _BACKFILL_AT + 4 or raw[:_HEADER] != raw[_HEADER:2 * _HEADER]:
        return None
    page_size = _PAGE_SIZE.unpack_from(raw, _PAGE_SIZE_AT)[0]
    return (_MX_FRAME.unpack_from(raw, _MX_FRAME_AT)[0], _MX_FRAME.unpack_from(raw, _BACKFILL_AT)[0],
            65536 if page_size == 1 else page_size)
