"""Real ``toymb journal run`` processes for the takeover and cluster tests, and the lease they share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import select

from broker.store.engines import open_engine
from journal_spark.delta_jars import journal_jars
from journal_spark.lease import LEASES
from tests.bridges_kafka.jobproc import JournalProcess


class Journal(JournalProcess):
    """One ``toymb journal run`` in its own process group (its JVM and Python workers included)."""

    def __init__(self, workdir: Path, name: str, database_url: str, *extra: str, lease_ms: int = 5000) -> None:
        self.workdir = workdir
        self.name = name
        self.log_path = workdir / f"journal-{name}.log"
        self.args = [sys.executable, "-m", "broker", "journal", "run", "--database-url", database_url,
                     "--journal-dir", str(workdir / "journal"), "--checkpoint-dir", str(workdir / "checkpoints"),
                     "--metrics-port", "0", "--trigger-ms", "200", "--lease-ms", str(lease_ms),
                     "--tmp-dir", str(workdir / "journal-tmp"), *extra]
        self.proc = None
        # What Spark's JVM and its Python workers leave in TMPDIR (nothing: see temp_folder_pids).
        self.extra_env = {"TMPDIR": str(system_tmp(workdir))}

    def start(self) -> Journal:
        super().start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """``signum`` to the whole process group (the driver, its JVM, Spark's Python workers)."""
        if self.alive():
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, as a supervisor would; SIGKILL if it does not stop in ``timeout``."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)


def system_tmp(workdir: Path) -> Path:
    """The TMPDIR the journal processes run with, which must stay empty."""
    folder = workdir / "system-tmp"
    folder.mkdir(exist_ok=True)
    return folder


def temp_folder_pids(workdir: Path) -> set[int]:
    """The pids of the journal processes whose temporary folders (journal_spark.scratch) are there."""
    root = workdir / "journal-tmp"
    return {int(p.name.split("-")[0]) for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def lease_holder(database_url: str) -> tuple[int, int] | None:
    """(pid of the holding process, epoch) of the journal lease, or None before anyone took it."""
    engine = open_engine(database_url, pooled=False)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(LEASES.c.holder, LEASES.c.epoch).where(LEASES.c.name == "journal")).first()
    except Exception:  # noqa: BLE001 - the table is created by the first journal process
        return None
    finally:
        engine.dispose()
    return None if row is None else (int(row.holder.split(":")[1]), int(row.epoch))


def _table(workdir: Path) -> Any:
    """The journal's Delta table, or None before its first commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(workdir / "journal"))
    except TableNotFoundError:
        return None


def table_epoch(workdir: Path) -> int:
    """The lease epoch of the journal table's last commit (0 before the first)."""
    from journal_spark.table import split_version

    app = workdir / "checkpoints" / "table.sink" / "app_id"
    table = _table(workdir)
    if table is None or not app.is_file():
        return 0
    version = table.transaction_version(app.read_text().strip())
    return 0 if version is None else split_version(int(version))[0]


def table_rows(workdir: Path) -> int:
    import pyarrow as pa

    table = _table(workdir)
    if table is None:
        return 0
    actions = pa.table(table.get_add_actions(flatten=True))
    return sum(int(n or 0) for n in actions["num_records"].to_pylist())


class PrivateSparkCluster:
    """A Spark standalone master and two workers of its own (services/spark.sh), on free loopback ports."""

    def __init__(self, state: Path) -> None:
        from tests.support import ROOT, free_port

        self.script = str(ROOT / "services" / "spark.sh")
        self.state = state / "spark"
        self.port = free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.env = {**os.environ, "TOYMB_SERVICES_DIR": str(state), "TOYMB_SPARK_MASTER_PORT": str(self.port),
                    "TOYMB_SPARK_UI_PORT": str(free_port()),
                    "TOYMB_SPARK_WORKER_PORTS": f"{free_port()} {free_port()}", "TOYMB_PYTHON": sys.executable}
        self._share_journal_jars(state)

    @staticmethod
    def _share_journal_jars(state: Path) -> None:
        """Link this checkout's journal jars into the private state, so ``start`` does not fetch them
        again with Maven (two Maven runs: 6.8 CPU-s and 8 s of a loaded 2-core machine)."""
        folder = Path(journal_jars()[0]).parent
        private = state / "spark" / folder.name
        private.parent.mkdir(parents=True, exist_ok=True)
        if not private.exists():
            private.symlink_to(folder, target_is_directory=True)

    def executor_apps(self) -> set[str]:
        """The applications whose executors the workers ran (a folder each in a worker's work dir)."""
        return {app.name for work in self.state.glob("work-*") for app in work.glob("app-*")}

    def run(self, *command: str) -> None:
        done = subprocess.run([self.script, *command], env=self.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"services/spark.sh {' '.join(command)}: {done.stderr[-2000:]}"
