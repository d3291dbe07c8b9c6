"""The node's SQLite store checkpoints its write-ahead log in the background (broker/store/checkpoint.py).

What a user would notice: publish commits never copy the log into the database themselves; the log
stays bounded under continuous publishing, and under a reader that pins an old snapshot (writes
then wait instead of the log filling the disk); and a crash loses no acknowledged message.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store import Store, Topic
from broker.store.checkpoint import WalCheckpointer
from tests.support import wait_until

BODY = b"b" * 1000
MiB = 1 << 20


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _wal_bytes(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _batch(first: int, count: int) -> list[NewMessage]:
    return [NewMessage(f"m{first + i}", f"k{(first + i) % 16}", {}, "application/octet-stream", BODY)
            for i in range(count)]


@contextmanager
def _writer(db: Path, checkpointer: WalCheckpointer | None) -> Iterator[tuple[Store, Appender, Topic]]:
    store = Store(_url(db), checkpointer=checkpointer)
    store.create_schema()
    topic, _ = store.ensure_topic("t", 8)
    appender = Appender(store)
    appender.start()
    try:
        yield store, appender, topic
    finally:
        appender.stop()
        store.dispose()


def _check_stored(db: Path, count: int) -> None:
    """Every one of ``count`` messages is stored once, and each partition's offsets are dense."""
    with sqlite3.connect(db) as conn:
        ids = {row[0] for row in conn.execute("SELECT id FROM toymb_messages")}
        assert ids == {f"m{i}" for i in range(count)}
        for partition, n, low, high in conn.execute(
                'SELECT "partition", count(*), min("offset"), max("offset") FROM toymb_messages GROUP BY "partition"'):
            assert (low, high) == (0, n - 1), f"partition {partition} has a gap or a double"


@pytest.mark.parametrize("background", [True, False], ids=["background", "sqlite-default"])
def test_commits_copy_the_log_into_the_database_only_without_a_checkpointer(tmp_path: Path, background: bool) -> None:
    db = tmp_path / "toymb.db"
    # A checkpointer whose thread does not look during the test: only the commits could checkpoint.
    idle = WalCheckpointer(str(db), interval_s=3600, max_delay_s=3600) if background else None
    with _writer(db, idle) as (_store, appender, topic):
        for n in range(0, 8000, 200):  # ~8.5 MiB of log, past SQLite's automatic 1,000 pages (4 MiB)
            appender.append(topic, _batch(n, 200))
        db_bytes, wal_bytes = db.stat().st_size, _wal_bytes(db)
    if background:
        assert db_bytes < MiB < 6 * MiB < wal_bytes, "a commit copied the log into the database"
    else:
        assert db_bytes > 2 * MiB, "SQLite's own checkpoint did not run in a commit"
    _check_stored(db, 8000)


def _waiting_for(db: Path, checkpoint_bytes: int, max_delay_s: float) -> WalCheckpointer:
    """A checkpointer that looks every 10 ms and never needs a restart in these tests."""
    return WalCheckpointer(str(db), interval_s=0.01, checkpoint_bytes=checkpoint_bytes, max_delay_s=max_delay_s,
                           restart_bytes=8 * MiB, cap_bytes=8 * MiB)


def test_the_thread_checkpoints_once_enough_of_the_log_waits(tmp_path: Path) -> None:
    db = tmp_path / "toymb.db"
    checkpointer = _waiting_for(db, checkpoint_bytes=2 * MiB, max_delay_s=3600)
    with _writer(db, checkpointer) as (_store, appender, topic):
        appender.append(topic, _batch(0, 1000))  # ~1 MiB: fewer pages than it waits for
        wait_until(lambda: checkpointer.running and _wal_bytes(db) > MiB, what="the first megabyte in the log")
        time.sleep(0.3)  # some thirty looks of the thread
        assert checkpointer.checkpoints == 0 and db.stat().st_size < MiB
        appender.append(topic, _batch(1000, 1500))  # past 2 MiB
        wait_until(lambda: checkpointer.checkpoints > 0 and db.stat().st_size > 2 * MiB, what="a checkpoint")
    _check_stored(db, 2500)


def test_fewer_pages_are_checkpointed_after_the_longest_delay(tmp_path: Path) -> None:
    db = tmp_path / "toymb.db"
    with _writer(db, _waiting_for(db, checkpoint_bytes=8 * MiB, max_delay_s=0.2)) as (_store, appender, topic):
        appender.append(topic, _batch(0, 1000))  # ~1 MiB, far fewer pages than it waits for
        wait_until(lambda: db.stat().st_size > MiB, what="the megabyte checkpointed after the delay")
    _check_stored(db, 1000)


def test_the_log_stays_bounded_under_continuous_publishing(tmp_path: Path) -> None:
    db = tmp_path / "toymb.db"
    checkpointer = WalCheckpointer(str(db), interval_s=0.01, checkpoint_bytes=64 << 10, restart_bytes=256 << 10,
                                   cap_bytes=2 * MiB)
    peak = 0
    with _writer(db, checkpointer) as (_store, appender, topic):
        for n in range(0, 20_000, 200):  # ~20 MiB of log without checkpoints: ten times the cap
            appender.append(topic, _batch(n, 200))
            peak = max(peak, _wal_bytes(db))
        # Checked before the store closes (its last connection's close checkpoints everything).
        assert db.stat().st_size > 12 * MiB, "the messages were not checkpointed into the database"
    # Unbounded, the log would hold all ~20 MiB; a slow checkpointer thread may let a few commits
    # past the cap before the writer holds off, hence the margin.
    assert peak <= 4 * checkpointer.cap_bytes, f"the log grew to {peak} bytes"
    _check_stored(db, 20_000)


def test_a_reader_pinning_the_log_makes_writes_wait_not_the_log_grow(tmp_path: Path) -> None:
    db = tmp_path / "toymb.db"
    checkpointer = WalCheckpointer(str(db), interval_s=0.01, checkpoint_bytes=64 << 10, restart_bytes=256 << 10,
                                   cap_bytes=2 * MiB)
    total = 10_000  # ~10 MiB of log: five times the cap
    with _writer(db, checkpointer) as (_store, appender, topic):
        appender.append(topic, _batch(0, 200))
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        seen = reader.execute("SELECT count(*) FROM toymb_messages").fetchone()[0]  # the snapshot is pinned now
        published = [200]

        def publish() -> None:
            for n in range(200, total, 200):
                appender.append(topic, _batch(n, 200))
                published[0] = n + 200

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            wait_until(lambda: checkpointer.pinned >= 2, timeout=120, what="the writer waiting for the pinned log")
            held = published[0]
            assert held < total and publisher.is_alive(), "publishing went on past the cap"
            assert _wal_bytes(db) <= 4 * checkpointer.cap_bytes, f"the log grew to {_wal_bytes(db)} bytes"
            assert reader.execute("SELECT count(*) FROM toymb_messages").fetchone()[0] == seen == 200
        finally:
            reader.execute("COMMIT")
            reader.close()
            publisher.join(timeout=120)
        assert not publisher.is_alive() and published[0] == total
    _check_stored(db, total)


_CHILD = r"""
import sys
from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store import Store
from broker.store.checkpoint import WalCheckpointer

db = sys.argv[1]
checkpointer = WalCheckpointer(db, interval_s=0.005, checkpoint_bytes=32 << 10, restart_bytes=128 << 10,
                               cap_bytes=1 << 20)
store = Store(f"sqlite:///{db}", checkpointer=checkpointer)
store.create_schema()
topic, _ = store.ensure_topic("t", 8)
appender = Appender(store)
appender.start()
n = 0
while True:
    stored = appender.append(topic, [NewMessage(f"m{n + i}", f"k{(n + i) % 16}", {}, "text/plain", b"b" * 1000)
                                     for i in range(50)])
    n += 50
    lines = "".join(f"{s.id} {s.partition} {s.offset}\n" for s in stored)
    sys.stdout.write(f"{lines}restarts {checkpointer.restarts}\n")
    sys.stdout.flush()
"""


def test_sigkill_during_background_checkpoints_loses_no_acknowledged_message(tmp_path: Path) -> None:
    db = tmp_path / "toymb.db"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(db)], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    acked: dict[str, tuple[int, int]] = {}
    restarts = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            word, *rest = line.split()
            if word != "restarts":
                acked[word] = (int(rest[0]), int(rest[1]))
                continue
            restarts = int(rest[0])
            if (restarts >= 5 and len(acked) >= 5000) or len(acked) >= 50_000:
                break  # the log has started over several times: kill it mid-stream
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert len(acked) >= 5000 and restarts >= 5, f"the child stopped early ({len(acked)} acks, {restarts} restarts)"
    with sqlite3.connect(db) as conn:
        stored = {i: (p, o) for i, p, o in conn.execute('SELECT id, "partition", "offset" FROM toymb_messages')}
        for partition, n, high in conn.execute(
                'SELECT "partition", count(*), max("offset") FROM toymb_messages GROUP BY "partition"'):
            assert high == n - 1, f"partition {partition} has a gap"
    lost = {i for i in acked if i not in stored}
    assert not lost, f"{len(lost)} acknowledged messages lost"
    assert all(stored[i] == coords for i, coords in acked.items()), "a message moved"
