"""The journal's lease in the store: one ``toymb journal run`` works, the others stand by.

Table ``toymb_journal_lease`` holds one row per lease name: its holder, an *epoch* (the fencing
token, raised at every change of holder) and the time it expires. A holder renews it every third
of a period; a standby polls every third of a period and takes it once it has expired, with a
conditional UPDATE, so two processes can never both take it.

What a new epoch fences: the Delta table (the sink writes ``txnVersion = epoch << 32 | batch``,
so a former leader's commit is refused, see ``table``) and Kafka (the new leader's producer, of
the same ``transactional.id``, fences the old one's when it starts). A holder that fails to renew
(it was paused past its expiry, or lost the store) stops its whole process at once, JVM included.

A lease statement waits at most a third of a period for a lock (``_bound_lock_wait``): a process
frozen inside a write to the store (a SQLite write lock, a PostgreSQL row lock) must not hold the
others' lease calls for the store's usual 30 s. A standby whose attempt fails that way, or finds
the store unreachable, keeps standing by and tries again.

Clocks: expiry times are the holders' wall clocks, in ms. Processes on one machine share a clock;
across machines, keep clocks synchronised well within a period.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from sqlalchemy import BigInteger, Column, MetaData, String, Table, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError

from broker.store.engines import create_tables, open_engine

log = logging.getLogger(__name__)

METADATA = MetaData()
LEASES = Table(
    "toymb_journal_lease", METADATA,
    Column("name", String(200), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _bound_lock_wait(conn: Connection, wait_ms: int) -> None:
    """Make the statements of ``conn``'s transaction give up after waiting ``wait_ms`` for a lock."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.exec_driver_sql(f"PRAGMA busy_timeout={wait_ms}")
    elif dialect == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {wait_ms}")
    else:   # MariaDB counts whole seconds, at least one
        conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {max(1, -(-wait_ms // 1000))}")


class JournalLease:
    """One process's hold (or wait) on the lease ``name`` in the store at ``url``."""

    def __init__(self, url: str, period_ms: int, name: str = "journal", holder: str | None = None) -> None:
        self.name = name
        self.period_ms = period_ms
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch = 0
        self._lock_wait_ms = max(1, period_ms // 3)
        self._engine = open_engine(url, pooled=False)
        # Two journal processes start together: one creates the table, the other must not fail.
        create_tables(self._engine, METADATA.create_all)

    def try_acquire(self) -> bool:
        """Take the lease if it is free or expired (or ours); on success ``epoch`` is the new epoch."""
        with self._engine.begin() as conn:
            _bound_lock_wait(conn, self._lock_wait_ms)
            now = _now_ms()
            taken = conn.execute(
                update(LEASES).where(LEASES.c.name == self.name)
                .where((LEASES.c.expires_ms < now) | (LEASES.c.holder == self.holder))
                .values(holder=self.holder, epoch=LEASES.c.epoch + 1, expires_ms=now + self.period_ms))
            if taken.rowcount == 0:
                exists = conn.execute(select(LEASES.c.epoch).where(LEASES.c.name == self.name)).first()
                if exists is not None:
                    return False
                try:
                    with conn.begin_nested():
                        conn.execute(insert(LEASES).values(name=self.name, holder=self.holder, epoch=1,
                                                           expires_ms=now + self.period_ms))
                except IntegrityError:
                    return False   # another process inserted it first
            self.epoch = int(conn.execute(select(LEASES.c.epoch).where(LEASES.c.name == self.name)
                                          .where(LEASES.c.holder == self.holder)).scalar_one())
        return True

    def renew(self) -> bool:
        """Push the expiry a period ahead; False if the lease is no longer ours at our epoch."""
        with self._engine.begin() as conn:
            _bound_lock_wait(conn, self._lock_wait_ms)
            done = conn.execute(
                update(LEASES).where(LEASES.c.name == self.name).where(LEASES.c.holder == self.holder)
                .where(LEASES.c.epoch == self.epoch).values(expires_ms=_now_ms() + self.period_ms))
        return done.rowcount == 1

    def wait_acquire(self, stop: threading.Event) -> bool:
        """Stand by until the lease is ours (True) or ``stop`` is set (False).

        A store that is locked or unreachable for a while is waited out, not a reason to stop.
        """
        announced = False
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info("took the journal lease %r (epoch %d)", self.name, self.epoch)
                    return True
            except OperationalError as exc:
                log.warning("standing by: the store did not answer the lease %r (%s); trying again",
                            self.name, str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__)
            if not announced:
                log.info("standing by: another journal process holds the lease %r", self.name)
                announced = True
            stop.wait(self.period_ms / 3000)
        return False

    def keep(self, on_lost: Callable[[], None], stop: threading.Event) -> threading.Thread:
        """Renew every third of a period in a daemon thread; call ``on_lost`` once if renewal fails.

        A failed renewal (the store unreachable) is retried until the lease would have expired.
        """
        def loop() -> None:
            good_until = time.monotonic() + self.period_ms / 1000
            while not stop.wait(self.period_ms / 3000):
                started = time.monotonic()
                try:
                    if self.renew():
                        good_until = started + self.period_ms / 1000
                        continue
                    log.error("lost the journal lease %r: another process holds it now", self.name)
                except Exception as exc:  # noqa: BLE001 - the store may be down for a moment
                    if time.monotonic() < good_until:
                        log.warning("renewing the journal lease failed (%s); retrying", type(exc).__name__)
                        continue
                    log.error("could not renew the journal lease %r before it expired", self.name)
                on_lost()
                return

        thread = threading.Thread(target=loop, name="journal-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Let a standby take over at once (a clean stop)."""
        try:
            with self._engine.begin() as conn:
                _bound_lock_wait(conn, self._lock_wait_ms)
                conn.execute(update(LEASES).where(LEASES.c.name == self.name)
                             .where(LEASES.c.holder == self.holder).where(LEASES.c.epoch == self.epoch)
                             .values(expires_ms=0))
        except Exception as exc:  # noqa: BLE001 - it expires by itself anyway
            log.warning("releasing the journal lease: %s", type(exc).__name__)

    def dispose(self) -> None:
        self._engine.dispose()
