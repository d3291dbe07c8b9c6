"""Shared test helpers: free ports, real node processes, service probes."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
# "gw0", "gw1", ... under pytest-xdist; "" in a plain run.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# Each xdist worker takes ports from its own block below Linux's ephemeral range (32768+), so two
# workers never pick the same port, and no outgoing connection's source port takes one either.
# Checkouts that test side by side against the same service servers (git worktrees) set a lane of
# their own: it goes into database names, and moves the port blocks.
LANE = os.environ.get("TOYMB_TEST_LANE", "")
PORT_BLOCK = 1000
PORT_BASE = int(os.environ.get("TOYMB_TEST_PORT_BASE", "20000"))
_port_cursor = itertools.count()


def worker_name(name: str) -> str:
    """``name`` made private to this pytest-xdist worker (unchanged in a plain run)."""
    suffix = f"{LANE}{WORKER}"
    return f"{name}_{suffix}" if suffix else name


def own_database(server_url: str, database: str) -> str:
    """The URL of ``database`` on ``server_url``'s server (PostgreSQL or MariaDB), created if it does not exist yet."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from broker.store.sql import normalize_url

    url = make_url(normalize_url(server_url))
    admin = create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            if admin.dialect.name in ("mysql", "mariadb"):
                conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4"))
                return url.set(database=database).render_as_string(hide_password=False)
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": database}).first()
            if exists is None:
                conn.execute(text(f'CREATE DATABASE "{database}"'))
    finally:
        admin.dispose()
    return url.set(database=database).render_as_string(hide_password=False)


def stored_messages(store: Any, topic: str | None = None) -> list[Any]:
    """Every message row of ``topic`` (default: of every topic), through the store's own reads."""
    topics = [store.get_topic(topic)] if topic is not None else store.list_topics()
    return [row for t in topics if t is not None for p in range(t.partitions)
            for row in store.read_range(t.name, p, 0, 1 << 30)]


def need_service(available: bool, what: str) -> None:
    """Skip when a service is missing, except under CI=true where that is a failure."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is not available under CI; services/ should have started it")
    pytest.skip(f"{what} is not available (run services/all.sh start)")


def free_port() -> int:
    """A loopback port nobody listens on; under xdist, from this worker's own block."""
    if not WORKER:
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    base = PORT_BASE + int(WORKER.removeprefix("gw")) * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = base + next(_port_cursor) % PORT_BLOCK
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {base}..{base + PORT_BLOCK - 1}")


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(predicate: Any, timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_progressing(predicate: Any, progress: Any, *, stall: float, interval: float = 0.05,
                     what: str = "condition") -> Any:
    """Wait for ``predicate`` as long as ``progress()`` keeps changing: fail only after ``stall``
    seconds without a change. For jobs whose speed depends on the machine's load (a JVM start, a
    backlog), where a fixed deadline would fail a slow run instead of a stuck one."""
    last = progress()
    since = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall:
            raise AssertionError(f"no progress for {stall}s while waiting for {what} (last: {last!r})")
        time.sleep(interval)


class ChildProcess:
    """A process a test started, logging to ``log_path``: its log's tail, a crash, a clean stop."""

    proc: subprocess.Popen[bytes] | None = None
    log_path: Path
    stop_timeout_s = 15.0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after ``stop_timeout_s``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


class NodeProcess(ChildProcess):
    """A real ``toymb serve`` process on a loopback port."""

    def __init__(self, data_dir: Path, *, port: int | None = None, name: str = "toymb-1",
                 env: Mapping[str, str] | None = None, database_url: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.name = name
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.database_url = database_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"{name}-{self.port}.log"

    def start(self, wait: bool = True) -> NodeProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_") or k.startswith("TOYMB_TEST_")}
        env.update({"TOYMB_PORT": str(self.port), "TOYMB_NODE_NAME": self.name,
                    "TOYMB_DATA_DIR": str(self.data_dir), "TOYMB_LOG_LEVEL": "INFO"})
        if self.database_url:
            env["TOYMB_DATABASE_URL"] = self.database_url
        env.update(self.extra_env)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", "serve"], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=str(self.data_dir), start_new_session=True)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"node exited with {self.proc.returncode}:\n{self.log_tail()}")
            # Most polls come before the node listens. A refused connect costs ~0.03 ms of this
            # process's CPU, a refused requests.get ~0.7 ms (a Session each): 40-50 ms a start.
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            try:
                return requests.get(self.url + "/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout=timeout, what=f"node {self.name} ready")

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def __enter__(self) -> NodeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
