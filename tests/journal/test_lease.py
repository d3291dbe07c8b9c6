"""The journal lease in the store: one holder at a time, a higher epoch at every change of holder,
no renewal for a holder whose lease was taken; and ``--as-of`` parsing. No Spark here."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from journal_spark.errors import ReplayError
from journal_spark.lease import JournalLease


@pytest.fixture(params=["sqlite", "pg_url", "mariadb_url"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'toymb.db'}"
    found: str = request.getfixturevalue(request.param)
    return found


LEASE_MS = 3000


def test_one_holder_and_a_new_epoch_at_each_takeover(url: str) -> None:
    # A lease long enough that the checks made while it lives cannot outlast it on a loaded machine
    # (300 ms did, once, on MariaDB in CI: the old holder then rightly took an expired lease back).
    first, second = JournalLease(url, LEASE_MS, name=f"t-{time.time_ns()}"), None
    try:
        second = JournalLease(url, LEASE_MS, name=first.name)
        assert first.try_acquire() and first.epoch >= 1
        assert not second.try_acquire(), "a live lease has one holder"
        assert first.renew()
        time.sleep(LEASE_MS / 1000 + 0.2)    # first is paused past its expiry
        assert second.try_acquire() and second.epoch == first.epoch + 1
        assert not first.renew(), "a holder whose lease was taken cannot renew it"
        assert not first.try_acquire(), "nor take it back while the new holder's lease lives"
        second.release()
        assert first.try_acquire() and first.epoch == second.epoch + 1, "a released lease is free at once"
    finally:
        first.dispose()
        if second is not None:
            second.dispose()


def test_a_standby_waits_and_a_lost_lease_is_reported_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    holder, standby = JournalLease(url, 600), JournalLease(url, 600)
    stop = threading.Event()
    lost: list[float] = []
    try:
        assert holder.try_acquire()
        keeper = holder.keep(lambda: lost.append(time.monotonic()), stop)
        waiting = threading.Thread(target=standby.wait_acquire, args=(stop,), daemon=True)
        waiting.start()
        time.sleep(1.5)                      # well past a period: the renewals keep it
        assert standby.epoch == 0 and not lost
        standby.try_acquire()                # still held
        assert standby.epoch == 0
        # The holder stops renewing (paused); the standby takes over, and the holder learns it.
        stop.set()
        keeper.join(5)
        waiting.join(5)
        stop.clear()
        assert standby.wait_acquire(threading.Event()) and standby.epoch == 2
        holder.keep(lambda: lost.append(time.monotonic()), stop)   # it wakes up
        deadline = time.monotonic() + 10
        while not lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(lost) == 1
    finally:
        stop.set()
        holder.dispose()
        standby.dispose()


def parse_as_of(text: str) -> Any:
    """journal_spark.replay's, imported here: at module level it made every pytest worker import
    pyarrow and pandas (0.37 CPU-s) while collecting, whether or not it ran a journal test."""
    from journal_spark.replay import parse_as_of as parse

    return parse(text)


@pytest.mark.parametrize("text", ["soon", "2026-13-01", "-5", "99999999999999999999999"])
def test_as_of_refuses_what_is_not_a_time(text: str) -> None:
    with pytest.raises(ReplayError, match="--as-of"):
        parse_as_of(text)


def test_as_of_reads_iso_times_and_epoch_ms() -> None:
    assert parse_as_of("1700000000000").timestamp() == 1_700_000_000
    assert parse_as_of("2023-11-14T22:13:20").timestamp() == 1_700_000_000    # UTC unless it says so
    assert parse_as_of("2023-11-14T23:13:20+01:00").timestamp() == 1_700_000_000



def test_processes_starting_together_all_get_the_lease_table(tmp_path: Path) -> None:
    """Two journal processes started at once both created the table; the second failed with
    'table toymb_journal_lease already exists' (seen in CI). Every starter must come up."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for round_ in range(5):  # a fresh database each round: the race is at the first creation
        url = f"sqlite:///{tmp_path / f'race{round_}.db'}"
        start = ctx.Barrier(4)
        procs = [ctx.Process(target=_open_lease, args=(url, start)) for _ in range(4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        assert [p.exitcode for p in procs] == [0] * 4


def _open_lease(url: str, start: Any) -> None:
    start.wait(30)
    JournalLease(url, period_ms=1000).try_acquire()


def test_a_standby_waits_out_a_store_locked_by_a_frozen_writer(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A journal leader frozen (SIGSTOP) inside a write to the store holds its lock: the standby's
    attempt failed with 'database is locked' after the store's 30-s wait and the standby exited (seen
    in CI). Its lease calls now wait at most a third of a period, say so, and it keeps standing by."""
    from sqlalchemy import text

    from broker.store.engines import open_engine

    period_ms = 600
    holder = JournalLease(url, period_ms, name=f"frozen-{time.time_ns()}")
    standby = JournalLease(url, period_ms, name=holder.name)
    locker = open_engine(url, pooled=False)
    stop = threading.Event()
    outcome: list[object] = []

    def stand_by() -> None:
        try:
            outcome.append(standby.wait_acquire(stop))
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            outcome.append(exc)

    caplog.set_level(logging.WARNING, logger="journal_spark.lease")
    try:
        assert holder.try_acquire()          # and never renewed: it expires after a period
        with locker.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")          # the whole file's write lock
            else:
                conn.begin()
                conn.execute(text("SELECT epoch FROM toymb_journal_lease WHERE name = :n FOR UPDATE"),
                             {"n": holder.name})                # the lease row's lock
            waiting = threading.Thread(target=stand_by, daemon=True)
            waiting.start()
            waiting.join(4 * period_ms / 1000 + 1)               # several failed attempts
            assert outcome == [], f"the standby gave up while the store was locked: {outcome}"
            told = [r.getMessage() for r in caplog.records if "did not answer the lease" in r.getMessage()]
            assert len(told) >= 2, "the standby's attempts waited on the lock instead of trying again"
            conn.rollback()
        waiting.join(30)
        assert outcome == [True] and standby.epoch == holder.epoch + 1
    finally:
        stop.set()
        holder.dispose()
        standby.dispose()
        locker.dispose()
