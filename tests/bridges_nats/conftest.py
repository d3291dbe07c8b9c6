"""Fixtures of the NATS bridge tests: the reference codec jar (through Maven), the shared NATS and ActiveMQ.

NATS and ActiveMQ are shared with other test folders and xdist workers, so every test uses its own
uuid-named subjects and queues; tests that restart a server start a private one on free ports.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import requests
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from tests.support import ChildProcess, need_service, port_open, wait_until

HERE = Path(__file__).resolve().parent
REFERENCE = ("io.nats.bridge", "nats-jms-bridge-message", "1.0.4")
# The jar's classes need only Jackson (a static ObjectMapper) and SLF4J; not its IBM MQ/JMS dependencies.
NEEDED = ("nats-jms-bridge-message", "jackson-databind", "jackson-core", "jackson-annotations", "slf4j-api")
NATS_URL = "nats://127.0.0.1:4222"
STOMP_URL = "stomp://127.0.0.1:61613"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>toymb.tests</groupId><artifactId>nats-codec-reference</artifactId><version>1</version>
  <dependencies><dependency><groupId>{0}</groupId><artifactId>{1}</artifactId><version>{2}</version></dependency>
  </dependencies>
</project>
"""


def unique(prefix: str) -> str:
    """A subject/queue name no other test (or xdist worker) uses."""
    return f"toymb.test.{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def reference_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The 1.0.4 jar and what its codec classes load, fetched by Maven (cached in ~/.m2)."""
    need_service(shutil.which("mvn") is not None and shutil.which("java") is not None, "mvn and java")
    work = tmp_path_factory.mktemp("nats-reference")
    (work / "pom.xml").write_text(POM.format(*REFERENCE), encoding="utf-8")
    done = subprocess.run(
        ["mvn", "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={work / 'lib'}", f"-DincludeArtifactIds={','.join(NEEDED)}"],
        capture_output=True, text=True, timeout=600)
    need_service(done.returncode == 0, f"Maven Central for {':'.join(REFERENCE)} ({done.stdout[-500:]})")
    jars = sorted(str(p) for p in (work / "lib").glob("*.jar"))
    assert any("nats-jms-bridge-message-1.0.4" in j for j in jars), jars
    return ":".join(jars)


@pytest.fixture(scope="session")
def nats_url() -> str:
    need_service(port_open("127.0.0.1", 4222), "nats-server on 127.0.0.1:4222 (services/nats.sh)")
    return NATS_URL


@pytest.fixture(scope="session")
def stomp_url() -> str:
    need_service(port_open("127.0.0.1", 61613) and port_open("127.0.0.1", 61616),
                 "ActiveMQ with STOMP on 127.0.0.1:61613 (services/activemq.sh)")
    return STOMP_URL


# ----------------------------------------------------------------------------- the bridge process
JMS_JARS = [f"/usr/share/java/{name}.jar" for name in (
    "activemq-client", "geronimo-jms_1.1_spec", "hawtbuf", "slf4j-api", "geronimo-j2ee-management-1.1-spec")]
JMS_SERVICE = HERE / "JmsService.java"
OPENWIRE_URL = "tcp://127.0.0.1:61616"


@pytest.fixture(scope="session")
def java_jms() -> list[str]:
    """The java command line prefix for JmsService.java (Debian's ActiveMQ client jars)."""
    need_service(shutil.which("java") is not None and all(Path(j).exists() for j in JMS_JARS),
                 "java and Debian's ActiveMQ client jars (apt-get install activemq)")
    return ["java", "-cp", ":".join(JMS_JARS), str(JMS_SERVICE)]


def write_routes(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class BridgeProcess(ChildProcess):
    """A real ``toymb bridge nats`` process, with its management API on a free port."""

    stop_timeout_s = 30.0

    def __init__(self, routes: Path, log_dir: Path) -> None:
        self.routes = routes
        self.url = ""
        self.log_path = log_dir / f"nats-bridge-{uuid.uuid4().hex[:8]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> BridgeProcess:
        """Start it on a port the kernel picks (read back from its log: no race with other test runs)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        self.url = ""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "broker", "bridge", "nats", "--routes", str(self.routes), "--port", "0",
                 "--log-level", "INFO"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_started()
        return self

    def _find_url(self) -> str:
        started = self.log_path.read_text(errors="replace").rsplit("nats-bridge: ", 1)
        match = re.search(r"management on (http://[\d.]+:\d+)/bridges", started[-1]) if len(started) > 1 else None
        return match.group(1) if match else ""

    def wait_started(self, timeout: float = 60.0) -> None:
        def started() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the bridge exited with {self.proc.returncode}:\n{self.log_tail()}")
            self.url = self.url or self._find_url()
            if not self.url:
                return False
            try:
                bridges = requests.get(self.url + "/bridges", timeout=1).json()["bridges"]
            except (requests.RequestException, ValueError, KeyError):
                return False
            return all(b["state"] == "STARTED" and b["jms_connected"] and b["nats_connected"] for b in bridges)

        wait_until(started, timeout=timeout, what=f"the NATS bridge started\n{self.log_tail()}")

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = requests.get(f"{self.url}/bridges/{name}", timeout=10).json()
        return result

    def metric(self, name: str, bridge: str) -> float:
        """One sample of /metrics, e.g. ``metric("pending_requests", "rr")``."""
        text = requests.get(self.url + "/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith(f'{name}{{bridge="{bridge}"}} '):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no sample {name} for {bridge} in /metrics")



@pytest.fixture
def bridges(tmp_path: Path) -> Iterator[Callable[..., BridgeProcess]]:
    """Start bridge processes from routes lines; all are stopped after the test."""
    started: list[BridgeProcess] = []

    def start(lines: list[str], wait: bool = True) -> BridgeProcess:
        routes = write_routes(tmp_path / f"routes-{len(started)}.properties", lines)
        proc = BridgeProcess(routes, tmp_path)
        started.append(proc)
        return proc.start(wait)

    yield start
    for proc in started:
        proc.stop()


class NatsThread:
    """A nats-py client on an event loop of its own thread, so tests can run blocking code beside it."""

    def __init__(self, url: str = NATS_URL) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-nats", daemon=True)
        self.thread.start()
        self.nc: Any = self.call(nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2))

    def call(self, coro: Any, timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stream_messages(self, stream: str, subject: str, count: int) -> list[Any]:
        """The first ``count`` messages of a JetStream stream, read in pages of 1,000 by a consumer
        of its own (one ``get_msg`` request per message took about 25 s for 10,000)."""
        async def read() -> list[Any]:
            reader = await self.nc.jetstream().pull_subscribe(subject, stream=stream, config=ConsumerConfig(
                ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
            got: list[Any] = []
            while len(got) < count:
                got.extend(await reader.fetch(min(1000, count - len(got)), timeout=60))
            await reader.unsubscribe()
            return got

        return list(self.call(read(), timeout=300))

    def close(self) -> None:
        try:
            self.call(self.nc.close(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture
def nats_client(nats_url: str) -> Iterator[NatsThread]:
    client = NatsThread(nats_url)
    yield client
    client.close()


class JavaService:
    """JmsService.java serving requests; its output is read as it comes (a full pipe would stall it)."""

    def __init__(self, java_jms: list[str], queue: str, count: int) -> None:
        self.proc = subprocess.Popen([*java_jms, "serve", OPENWIRE_URL, queue, str(count)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.ready = threading.Event()
        # Each pipe has one reader, its own thread: Popen.communicate would read stdout too, and
        # take lines from under this reader (a test then saw an empty first line).
        self.readers = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._read_errors, daemon=True)]
        for reader in self.readers:
            reader.start()
        if not self.ready.wait(60):
            self.kill()
            raise AssertionError(f"the Java service did not start: {self.lines} {self.errors}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "READY":
                self.ready.set()
            else:
                self.lines.append(line.rstrip("\n"))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(line.rstrip("\n") for line in self.proc.stderr)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Wait for the service to end; its output lines (after READY) and its stderr."""
        self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(10)
        return "\n".join(self.lines), "\n".join(self.errors)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def start_java_service(java_jms: list[str], queue: str, count: int) -> JavaService:
    """JmsService.java serving ``count`` requests on ``queue``; returns once it consumes."""
    return JavaService(java_jms, queue, count)
