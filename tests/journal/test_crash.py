"""The Must-be-true crash test: SIGKILL the real journal job mid-batch, restart, and find every
message exactly once in the Delta table (read without Spark)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from broker.store.journal import JournalStore
from broker.store.sql import Store
from journal_spark.metrics import journal_lag
from journal_spark.source import read_end_offsets
from tests.journal.conftest import assert_journal_matches, fill_store
from tests.journal.jobs import PrivateSparkCluster
from tests.support import free_port, wait_progressing, wait_until

pytestmark = pytest.mark.slow


def _numbers(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.glob("*") if p.name.isdigit()] if folder.is_dir() else []


def _data_files(table: Path) -> int:
    return sum(1 for _ in table.glob("topic=*/date=*/*.parquet"))


def _log_entries(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").glob("*.json")) if table.is_dir() else []


# A journal job that neither logs nor plans a batch for this long is stuck, not slow.
STALL_S = 240


def _progress(data: Path, checkpoint: Path) -> tuple[int, int, int]:
    """What changes while a journal job starts and works: its log, its planned and done batches."""
    log = data / "journal-job.log"
    return (log.stat().st_size if log.exists() else 0, len(_numbers(checkpoint / "offsets")),
            len(_numbers(checkpoint / "commits")))


def system_tmp(data: Path) -> Path:
    folder = data.parent / "system-tmp"
    folder.mkdir(exist_ok=True)
    return folder


def _temp_folders(data: Path) -> list[Path]:
    """The journal processes' temporary folders (journal_spark.scratch), live or left by a killed one."""
    root = data.parent / "cache" / "toymb" / "journal-tmp"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _own_temp_folder(data: Path, pid: int) -> None:
    """A running job's temporary files are in its own folder, the only one: a killed job's is gone."""
    folders = _temp_folders(data)
    assert [p.name.split("-")[0] for p in folders] == [str(pid)], folders
    names = [p.name for p in folders[0].iterdir()]
    # Spark's local dir, and java.io.tmpdir (where Spark's artifact manager works from the start).
    assert any(n.startswith("blockmgr-") for n in names) and any(n.startswith("artifacts-") for n in names), names


class JournalJob:
    """A real ``toymb journal run`` process in its own process group (Spark's JVM included)."""

    def __init__(self, data_dir: Path, metrics_port: int, *extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        # Its temporary files: the default folder (under XDG_CACHE_HOME) and a TMPDIR of its own,
        # which must stay empty (the JVM ignores TMPDIR: _own_temp_folder checks it used the folder).
        env.update({"XDG_CACHE_HOME": str(data_dir.parent / "cache"), "TMPDIR": str(system_tmp(data_dir))})
        env.update({"TOYMB_DATA_DIR": str(data_dir), "TOYMB_JOURNAL_MAX_ROWS": "1000",
                    "TOYMB_JOURNAL_TRIGGER_MS": "100", "TOYMB_JOURNAL_METRICS_PORT": str(metrics_port),
                    "TOYMB_LOG_LEVEL": "INFO", "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable})
        self.log = open(data_dir / "journal-job.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", "journal", "run", *extra], env=env,
                                     cwd=str(data_dir), stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group at once: the Python driver, the JVM and Spark's Python workers."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.log.close()


# Mid-batch SIGKILLs of the driver per master: the local one and the standalone cluster's take turns
# on the same checkpoint and table, so the job also restarts under the other master each time.
KILLS_PER_MASTER = 2


# Only stops a hung run: each wait fails a job stalled for STALL_S, and on a loaded machine up to
# 10 JVM starts may take long without stalling.
@pytest.mark.timeout(2400)
def test_sigkill_of_driver_and_worker_leaves_every_message_exactly_once(tmp_path: Path) -> None:
    """SIGKILL the journal job mid-batch, on ``local[*]`` and on a Spark standalone cluster
    (services/spark.sh) in turn, and once one executor's worker too; a final run drains the rest.

    One run for both masters (they were two tests, each filling its store, starting its own job
    four times or more and draining it): the masters share the store, checkpoint and table, so each
    start after a kill resumes what the other master's job left mid-batch.
    """
    cluster = PrivateSparkCluster(tmp_path / "services")
    cluster.run("start")
    try:
        _crash_run(tmp_path, "local[*]", cluster)
    finally:
        cluster.run("stop")


def _crash_run(tmp_path: Path, local: str, cluster: PrivateSparkCluster) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = fill_store(f"sqlite:///{data / 'toymb.db'}", {"orders": (8, 15000), "audit": (3, 5000)})
    assert store.count_messages() == 20000
    checkpoint = data / "checkpoints" / "table"
    table = data / "journal"
    seed = int(os.environ.get("TOYMB_TEST_SEED", time.time()))
    rng = random.Random(seed)
    kills = {local: 0, cluster.master: 0}
    attempts, cluster_attempts, worker_kills = 0, 0, 0
    where: list[tuple[str, str, int, int, int]] = []
    port = free_port()
    scraped = ""
    while min(kills.values()) < KILLS_PER_MASTER:
        attempts += 1
        assert attempts <= 10, \
            f"could not kill mid-batch {KILLS_PER_MASTER} times per master (seed {seed}, kills at {where})"
        # The master with fewer kills so far; on a tie, the other one than last time.
        master = min(kills, key=lambda m: (kills[m], bool(where) and where[-1][0] == m))
        on_cluster = master == cluster.master
        cluster_attempts += on_cluster
        job = JournalJob(data, port, "--master", master)
        try:
            def in_flight(at_least: int = 0) -> bool:
                assert job.alive(), (data / "journal-job.log").read_text()[-3000:]  # noqa: B023
                done = _numbers(checkpoint / "commits")
                planned = _numbers(checkpoint / "offsets")
                return bool(planned) and max(planned) > max(done, default=-1) and max(planned) >= at_least

            # Spread the kills over the run: let the restarted job get a few batches further first.
            target = (where[-1][2] + rng.randint(1, 3)) if where else rng.randint(0, 2)
            # A loaded machine may take long to start the JVM; a job that does nothing for STALL_S is stuck.
            wait_progressing(lambda: in_flight(target), lambda: _progress(data, checkpoint),  # noqa: B023
                             stall=STALL_S, interval=0.02, what=f"batch {target} in flight")
            _own_temp_folder(data, job.proc.pid)
            if not scraped:
                scraped = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            mode = rng.choice(["random", "files-written", "committing"])
            if on_cluster and cluster_attempts == 2:
                # One executor's worker dies mid-batch: Spark runs its tasks again on the other one.
                # Its executor's JVM extracted its native libraries into the worker's tmp-1, not /tmp.
                executor_tmp = cluster.state / "tmp-1"
                wait_until(lambda: any(p.name.startswith("liblz4-java-") for p in executor_tmp.iterdir()),  # noqa: B023
                           timeout=STALL_S, interval=0.1, what="worker 1's executor at work")
                time.sleep(rng.uniform(0, 0.5))
                extracted = {p.name for p in executor_tmp.iterdir()}
                cluster.run("kill-worker", "1")
                worker_kills += 1
                wait_progressing(lambda: in_flight(target + 1), lambda: _progress(data, checkpoint),  # noqa: B023
                                 stall=STALL_S, interval=0.02, what="a batch after the worker's death")
                cluster.run("start-worker", "1")
                # The dead executor's files went with its worker's restart.
                assert not extracted & {p.name for p in executor_tmp.iterdir()}
                mode = "after a worker's death"
            elif mode == "random":
                time.sleep(rng.uniform(0, 1.0))
            elif mode == "files-written":
                # Data files of the batch are on disk, its commit is not in the table's log yet.
                files = _data_files(table)
                wait_until(lambda: _data_files(table) != files or not in_flight(), timeout=30,  # noqa: B023
                           interval=0.005, what="a batch's data files")
                time.sleep(rng.uniform(0, 0.3))
            else:
                # Between the table's commit and Spark's: the re-run must be skipped by Delta's txn marks.
                commits = _log_entries(table)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and _log_entries(table) == commits and in_flight():
                    time.sleep(0.003)
        finally:
            job.kill()
        planned, done = _numbers(checkpoint / "offsets"), _numbers(checkpoint / "commits")
        if planned and max(planned) > max(done, default=-1):
            kills[master] += 1
            where.append((master, mode, max(planned), len(_log_entries(table)), _data_files(table)))
    assert "toymb_journal_lag_total" in scraped

    assert worker_kills == 1
    # The final run on the cluster: a clean stop there removes the driver's folder too.
    final = JournalJob(data, port, "--once", "--max-rows", "20000", "--master", cluster.master)
    try:
        final.proc.wait(timeout=300)
    finally:
        final.kill()
    assert final.proc.returncode == 0, (data / "journal-job.log").read_text()[-3000:]
    # A clean stop removes its own folder; nothing went to TMPDIR or the cwd (Spark's warehouse).
    assert _temp_folders(data) == [] and list(system_tmp(data).iterdir()) == []
    assert not (data / "spark-warehouse").exists()

    assert_journal_matches(data / "journal", store)
    journal = JournalStore.of(store)
    ends = read_end_offsets(journal)
    assert journal.journaled_offsets() == {(t, p): n for t, parts in ends.items() for p, n in enumerate(parts)}
    assert journal_lag(journal) == {"audit": 0, "orders": 0}
    print(f"seed {seed}: killed mid-batch at {where}")
    Store.dispose(store)
