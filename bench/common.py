"""Shared pieces of the benchmarks: node processes, RSS, result files and plots."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import requests


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status_mb(pid: int, field: str) -> float:
    """A memory line (``VmHWM``, ``VmRSS``) of a live process's /proc status, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MiB."""
    return _status_mb(pid, "VmHWM")


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) of a live process now, in MiB."""
    return _status_mb(pid, "VmRSS")


def cpu_seconds(pid: int) -> float:
    """User and system CPU a live process has used, in seconds (/proc/<pid>/stat): a figure the
    other work on a shared machine does not inflate, as it does wall-clock rates."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class BenchNode:
    """A ``toymb serve`` process for a benchmark, on its own data dir."""

    def __init__(self, env: Mapping[str, str] | None = None, data_dir: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = data_dir or Path(tempfile.mkdtemp(prefix="toymb-bench-"))
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BenchNode:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        env.update({"TOYMB_PORT": str(self.port), "TOYMB_DATA_DIR": str(self.dir), "TOYMB_LOG_LEVEL": "WARNING"})
        env.update(self.env)
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", "serve"], env=env, cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "node.log", "ab"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"bench node did not start; see {self.dir / 'node.log'}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def write_results(out_dir: Path, name: str, results: dict[str, Any], bars: Mapping[str, float] | None = None,
                  ylabel: str = "ratio") -> None:
    """Write ``<name>.json`` and, when ``bars`` is given, ``<name>.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    if not bars:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(list(bars), list(bars.values()), color="#4878a8")
    ax.set_xlabel(ylabel)
    ax.set_title(name)
    for i, v in enumerate(bars.values()):
        ax.text(v, i, f" {v:.2f}", va="center")
    fig.tight_layout()
    fig.savefig(out_dir / f"{name}.png", dpi=100)
    plt.close(fig)


def report(title: str, rows: Mapping[str, Any]) -> None:
    print(f"\n== {title}")
    for key, value in rows.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"  {key:<48} {shown}")
