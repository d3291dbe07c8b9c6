"""A real ``toymb journal run`` process for the crash tests (killed with SIGKILL, process group and all)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class JournalProcess:
    """``python -m broker journal run`` in its own session, so the JVM dies with it on SIGKILL."""

    extra_env: dict[str, str] = {}   # more environment for the job (never changed in place)

    def __init__(self, workdir: Path, database_url: str, routes: Path, *, once: bool = False,
                 max_rows: int = 2000, master: str = "local[2]") -> None:
        self.workdir = workdir
        self.args = [sys.executable, "-m", "broker", "journal", "run", "--database-url", database_url,
                     "--routes", str(routes), "--journal-dir", str(workdir / "journal"),
                     "--checkpoint-dir", str(workdir / "checkpoints"), "--metrics-port", "0",
                     "--trigger-ms", "200", "--max-rows", str(max_rows), "--master", master]
        if once:
            self.args.append("--once")
        self.log_path = workdir / "journal.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> JournalProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        env.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                    "TOYMB_LOG_LEVEL": "INFO", **self.extra_env})
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {' '.join(self.args[3:])}\n".encode())
            self.proc = subprocess.Popen(self.args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=str(self.workdir))
        return self

    def kill(self) -> None:
        """SIGKILL the job and every process it started (Spark's JVM, Python workers)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the journal job did not finish in {timeout}s:\n"
                                 f"{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        """The log's first error lines (where a Java trace names its cause), then its last lines."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        all_lines = text.splitlines()
        errors = [line for line in all_lines
                  if ("Error" in line or "Exception" in line) and not line.lstrip().startswith("at ")][:15]
        return "\n".join(["--- first error lines ---", *errors, "--- last lines ---", *all_lines[-lines:]])
