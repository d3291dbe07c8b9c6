"""Opening the database: engines with each dialect's settings (SQLite's WAL and sync, the servers'
pools), and tables created under the schema lock by whichever process starts first."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import NullPool

from . import dialects
from .checkpoint import WRITER_BUSY_TIMEOUT_MS, WalCheckpointer, background_pragmas
from .dialects import normalize_url

log = logging.getLogger(__name__)


def open_engine(url: str, *, pool_size: int = 20, pooled: bool = True, synchronous: str = "FULL",
                checkpointer: WalCheckpointer | None = None) -> Engine:
    """An engine with SQLite in WAL mode (full sync: an ack survives power loss), PostgreSQL or MariaDB.

    ``synchronous`` is SQLite's setting for this engine's connections: ``NORMAL`` only for writes
    that a power loss may take back (see :meth:`Store.lazy_engine`). With a ``checkpointer`` (of
    the same SQLite file), the connections' commits never checkpoint: it does, in the background,
    started when the first connection opens.
    """
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                               poolclass=None if pooled else NullPool)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute(f"PRAGMA busy_timeout={WRITER_BUSY_TIMEOUT_MS}")
            if checkpointer is not None:
                background_pragmas(cursor, checkpointer.limit_bytes)
                checkpointer.start()
            cursor.close()

        return engine
    options = dialects.engine_options(url)
    if pooled:
        return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, **options)
    return create_engine(url, poolclass=NullPool, **options)


def background_checkpointer(url: str) -> WalCheckpointer | None:
    """A :class:`~broker.store.checkpoint.WalCheckpointer` for the SQLite file of ``url``; None for
    another database (its server checkpoints) or an in-memory one (no log)."""
    url = normalize_url(url)
    path = sqlite_file(url) if url.startswith("sqlite") else ""
    return WalCheckpointer(path) if path else None


def sqlite_file(url: str) -> str:
    """The file of a SQLite URL; empty for an in-memory database."""
    path = url.split("///", 1)[1] if "///" in url else ""
    return "" if path == ":memory:" else path


def create_tables(engine: Engine, create: Callable[[Connection], None]) -> None:
    """Run ``create`` (which creates missing tables) under the schema lock, retrying when another
    process raced it: safe when several processes start on one database at once."""
    for attempt in range(5):
        try:
            with engine.begin() as conn, dialects.schema_lock(conn):
                create(conn)
            return
        except (IntegrityError, OperationalError) as exc:  # another process raced us
            if attempt == 4:
                raise
            log.debug("creating tables, retry: %s", exc)
            time.sleep(0.2 * (attempt + 1))
