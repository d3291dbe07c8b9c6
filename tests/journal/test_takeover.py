"""Standby takeover: two journal processes share the lease in the store; the active one is
SIGKILLed three times while 20,000 messages go to the table and to Kafka; a paused former leader
that wakes up cannot commit, to the table or to JMS."""

from __future__ import annotations

import random
import signal
import sqlite3
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from broker.appender import Appender
from broker.store.sql import Store
from tests.bridges_jms.conftest import activemq, unique, write_routes  # noqa: F401 - activemq: a fixture
from tests.bridges_jms.test_faults import Collector
from tests.bridges_kafka.conftest import append_orders, consume_all, create_topics, routes_file
from tests.journal.conftest import assert_journal_matches, fill_store, sample_message, store_rows
from tests.journal.jobs import Journal, lease_holder, system_tmp, table_epoch, table_rows, temp_folder_pids
from tests.support import wait_progressing, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

LEASE_MS = 5000
TOTAL = 20_000
PARTITIONS = 4
KILLS = 3
STALL_S = 240   # a journal that neither logs nor commits for this long is stuck, not slow


def _progress(workdir: Path) -> tuple[int, ...]:
    logs = sorted(workdir.glob("journal-*.log"))
    return (*[p.stat().st_size for p in logs], len(list((workdir / "journal" / "_delta_log").glob("*.json")))
            if (workdir / "journal" / "_delta_log").is_dir() else 0)


def _freeze_outside_a_store_write(journal: Journal, db_file: Path) -> None:
    """SIGSTOP ``journal`` at a moment it holds no write lock on the SQLite store.

    A leader frozen inside a write (its lease renewal) keeps the whole file locked until it is
    woken: every writer, the standby's lease included, must then wait for it. That is SQLite's
    single writer, not the takeover under test, so such a moment is skipped: wake it, try again.
    """
    for _ in range(50):
        journal.signal(signal.SIGSTOP)
        time.sleep(0.05)             # the signal is sent, not yet surely taken: let it land
        probe = sqlite3.connect(db_file, timeout=0.5, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            journal.signal(signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError("the journal held the store's write lock at every one of 50 tries")


def _publish_in_phases(url: str, phases: list[threading.Event], stop: threading.Event) -> threading.Thread:
    """Append TOTAL messages to "orders" (and some to an unrouted topic) in ``len(phases)`` equal
    parts, part k once ``phases[k]`` is set: so there is work before and after every kill."""
    def run() -> None:
        store = Store(url)
        appender = Appender(store)
        appender.start()
        try:
            topic, _ = store.ensure_topic("orders", PARTITIONS)
            noise, _ = store.ensure_topic("noise", 1)
            per_phase = TOTAL // len(phases)
            for k, go in enumerate(phases):
                while not go.wait(0.2):
                    if stop.is_set():
                        return
                for start in range(k * per_phase, (k + 1) * per_phase, 250):
                    append_orders(appender, topic, noise, start, 250)
                    if stop.wait(0.25):
                        return
        finally:
            appender.stop()
            store.dispose()

    thread = threading.Thread(target=run, name="publisher", daemon=True)
    thread.start()
    return thread


def _standing_by(job: Journal) -> bool:
    """The process's latest start got as far as the lease (its Spark session is up): waiting, or holding it."""
    latest = job.log_path.read_text(errors="replace").rsplit("===== start", 1)[-1]
    return "standing by" in latest or "took the journal lease" in latest


def _active(jobs: dict[str, Journal], url: str) -> tuple[Journal, int] | None:
    held = lease_holder(url)
    if held is None:
        return None
    job = next((j for j in jobs.values() if j.alive() and j.pid == held[0]), None)
    return None if job is None else (job, held[1])


@pytest.mark.usefixtures("kafka")
def test_standby_takes_over_from_a_sigkilled_leader_three_times(tmp_path: Path, names: Any) -> None:
    dest = names("takeover")
    create_topics(dest, partitions=PARTITIONS)
    routes = routes_file(tmp_path, f"bridge.id={dest}\nroutes.o.predicate=msg.address==orders\n"
                                   f"routes.o.dest.topic={dest}\n")
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    Store(url).create_schema()
    jobs = {n: Journal(tmp_path, n, url, "--routes", str(routes), "--max-rows", "3000", "--master", "local[2]",
                       lease_ms=LEASE_MS).start() for n in ("a", "b")}
    stop = threading.Event()
    phases = [threading.Event() for _ in range(KILLS + 1)]
    phases[0].set()
    publisher = _publish_in_phases(url, phases, stop)
    rng = random.Random(20)
    took: list[float] = []      # SIGKILL -> the standby holds the lease
    resumed: list[float] = []   # SIGKILL -> its first commit to the table
    try:
        for kill in range(KILLS):
            def working() -> bool:
                assert all(j.alive() for j in jobs.values()), "\n".join(j.log_tail() for j in jobs.values())
                found = _active(jobs, url)
                return found is not None and table_epoch(tmp_path) == found[1]

            wait_progressing(working, lambda: _progress(tmp_path), stall=STALL_S, interval=0.1,
                             what="the active journal committing")
            # Each live process has its temporary folder (neither one's start removed the other's);
            # a killed one's went when it started again.
            assert temp_folder_pids(tmp_path) == {j.pid for j in jobs.values()}
            time.sleep(rng.uniform(0, 2.0))
            found = _active(jobs, url)
            assert found is not None
            leader, epoch = found
            killed_at = time.monotonic()
            leader.kill()
            phases[kill + 1].set()   # more messages for the new leader
            wait_until(lambda: (lease_holder(url) or (0, 0))[1] > epoch, timeout=STALL_S,  # noqa: B023
                       interval=0.05, what="the standby taking the lease")
            took.append(time.monotonic() - killed_at)
            wait_progressing(lambda: table_epoch(tmp_path) > epoch, lambda: _progress(tmp_path),  # noqa: B023
                             stall=STALL_S, interval=0.1, what="the new leader committing")
            resumed.append(time.monotonic() - killed_at)
            if kill == KILLS - 1:
                break   # no kill follows: a standby now would only cost a JVM start
            leader.start()   # back as the standby; the next kill waits until it stands by
            wait_progressing(lambda: _standing_by(leader), lambda: _progress(tmp_path),  # noqa: B023
                             stall=STALL_S, interval=0.2, what="the restarted process standing by")
        publisher.join(300)
        assert not publisher.is_alive()
        store = Store(url)
        wait_progressing(lambda: table_rows(tmp_path) >= store.count_messages(), lambda: _progress(tmp_path),
                         stall=STALL_S, interval=0.5, what="the table to hold every message")
        records = consume_all(dest, expect=TOTAL, timeout_s=300)
    finally:
        stop.set()
        for job in jobs.values():
            if job.alive():
                job.stop()
    assert list(system_tmp(tmp_path).iterdir()) == []
    assert_journal_matches(tmp_path / "journal", store)
    counts = Counter(r.key().decode() for r in records)
    duplicates = [k for k, n in counts.items() if n > 1]
    assert not duplicates, f"{len(records) - len(counts)} duplicates in Kafka, e.g. {duplicates[:5]}"
    assert set(counts) == {f"m-{i:05d}" for i in range(TOTAL)}
    period = LEASE_MS / 1000
    print(f"takeover (SIGKILL -> lease taken), s: {[round(t, 2) for t in took]}; mean {statistics.mean(took):.2f}, "
          f"max {max(took):.2f} = {max(took) / period:.2f} lease periods of {period:.0f} s; "
          f"to the first commit: mean {statistics.mean(resumed):.2f}, max {max(resumed):.2f} "
          f"= {max(resumed) / period:.2f} periods")
    store.dispose()


@pytest.mark.usefixtures("activemq")
def test_a_paused_former_leader_cannot_commit(tmp_path: Path) -> None:
    """SIGSTOP the leader: the standby takes the lease and commits; the frozen one's JMS connection
    (default heart-beats) is dropped by ActiveMQ, so the standby gets the marker and exports every
    message to JMS exactly once while the former leader is still frozen; woken, it cannot commit."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (4, 3000)})
    queue = unique("paused")
    routes = write_routes(tmp_path / "routes.properties", [
        f"bridge.id={unique('paused-bridge')}", "routing.start=earliest",
        "routes.o.predicate=msg.address==orders", f"routes.o.dest.jms.queue={queue}"])
    args = ("--routes", str(routes), "--max-rows", "500", "--master", "local[1]")
    old = Journal(tmp_path, "old", url, *args, lease_ms=3000).start()
    new = Journal(tmp_path, "new", url, *args, lease_ms=3000)
    collector = Collector(f"/queue/{queue}")
    collector.thread.start()
    try:
        wait_progressing(lambda: table_epoch(tmp_path) == 1 and len(collector.frames) > 0,
                         lambda: (*_progress(tmp_path), len(collector.frames)), stall=STALL_S,
                         interval=0.1, what="the first leader committing to the table and to JMS")
        _freeze_outside_a_store_write(old, tmp_path / "toymb.db")   # a long GC pause, a frozen VM
        new.start()
        wait_progressing(lambda: table_epoch(tmp_path) == 2, lambda: _progress(tmp_path), stall=STALL_S,
                         interval=0.1, what="the standby taking over and committing")
        appender = Appender(store)
        appender.start()
        topic, _ = store.ensure_topic("orders", 4)
        appender.append(topic, [sample_message(10_000 + i, random.Random(i)) for i in range(2000)])
        appender.stop()
        # Progress is a commit or a message in JMS, not a log line: the standby logs each retry.
        wait_progressing(lambda: len(collector.frames) >= 5000,
                         lambda: (_progress(tmp_path)[-1], len(collector.frames)), stall=STALL_S, interval=0.5,
                         what="every message in JMS while the former leader is frozen")
        old.signal(signal.SIGCONT)
        assert old.proc is not None
        code = old.proc.wait(STALL_S)
        assert code != 0, old.log_tail()
        assert "lost the journal lease" in old.log_tail(400) or "took over" in old.log_tail(400), old.log_tail()
        wait_progressing(lambda: table_rows(tmp_path) >= 5000, lambda: _progress(tmp_path), stall=STALL_S,
                         interval=0.5, what="the new leader journaling everything")
        assert new.alive(), new.log_tail()
        time.sleep(3)    # anything sent twice would arrive now
    finally:
        old.signal(signal.SIGCONT)
        old.kill()
        if new.alive():
            new.stop()
        collector.stop.set()
        collector.thread.join(10)
    assert table_epoch(tmp_path) == 2
    assert_journal_matches(tmp_path / "journal", store)
    # Messages have no id in JMS: each is told by its body and its headers (JMS properties), and
    # the fingerprints must be the store's, each as often (a few bodies repeat by chance).
    expected = Counter((r["body"], r["headers"].get("n"), r["headers"].get("trace"))
                       for r in store_rows(store).values())
    got = Counter((f.body, f.headers.get("n"), f.headers.get("trace")) for f in collector.frames)
    assert got == expected, (f"{(expected - got).total()} missing and {(got - expected).total()} extra "
                             f"of {expected.total()} in JMS")
    store.dispose()
