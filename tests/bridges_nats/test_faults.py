"""Faults: a private ActiveMQ, then a private nats-server, restarted during a stream of requests.

Both are private (free ports, own state) so the shared servers of the other tests stay up.
"""

from __future__ import annotations

import asyncio
import collections
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest

from journal_spark.jms.errors import JmsConnectionError
from journal_spark.jms.stompclient import StompClient
from tests.bridges_jms.conftest import PrivateActiveMQ
from tests.support import need_service, port_open, wait_until

from .conftest import BridgeProcess, NatsThread, unique


class PrivateNats:
    """A nats-server of its own on a free port (JetStream off: request/reply needs none)."""

    def __init__(self, log_dir: Path) -> None:
        binary = shutil.which("nats-server") or "/usr/bin/nats-server"
        need_service(Path(binary).exists(), "nats-server (services/nats.sh installs it)")
        self.binary = binary
        self.port = 0
        self.url = ""
        self.log = log_dir / f"nats-{uuid.uuid4().hex[:8]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateNats:
        """Start on a port the kernel picks (-p -1) the first time, on the same port after a kill."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "-a", "127.0.0.1", "-p", str(self.port or -1)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if not self.port:
            def listening() -> bool:
                found = re.search(r"Listening for client connections on 127\.0\.0\.1:(\d+)", self.log.read_text())
                if found:
                    self.port = int(found.group(1))
                return found is not None

            wait_until(listening, timeout=30, what="the private nats-server's port in its log")
            self.url = f"nats://127.0.0.1:{self.port}"
        wait_until(lambda: port_open("127.0.0.1", self.port), timeout=30, what="the private nats-server up")
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    server = PrivateNats(tmp_path).start()
    yield server
    server.kill()


@pytest.fixture
def private_amq(stomp_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateActiveMQ]:
    broker = PrivateActiveMQ(tmp_path_factory.mktemp("activemq")).start()
    yield broker
    broker.stop()


def serve_jms(url: str, queue: str, stop: threading.Event) -> None:
    """A JMS service over STOMP answering every request; it reconnects after ActiveMQ restarts."""
    while not stop.is_set():
        client = StompClient(url, timeout=5)
        try:
            client.connect()
            client.subscribe(f"/queue/{queue}", "svc", ack="auto")
            while not stop.is_set():
                frame = client.receive(0.2)
                if frame is not None and "reply-to" in frame.headers:
                    client.send(frame.headers["reply-to"], b"ok:" + frame.body,
                                {"correlation-id": frame.headers.get("correlation-id", "")})
        except JmsConnectionError:
            time.sleep(0.2)
        finally:
            client.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bridge_recovers_from_activemq_then_nats_restarts_and_no_request_hangs(
        private_amq: PrivateActiveMQ, private_nats: PrivateNats, bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("fault"), unique("fault")
    bridge = bridges([
        f"bridge.id={unique('nb')}", f"nats.servers={private_nats.url}", "nats.reconnect.wait.ms=100",
        f"jms.stomp.port={private_amq.stomp_port}", "jms.reconnect.initial.ms=100", "jms.reconnect.max.ms=1000",
        "nats-bridge.f.type=request-reply", f"nats-bridge.f.source.nats.subject={subject}",
        f"nats-bridge.f.dest.jms.queue={queue}", "nats-bridge.f.timeout.ms=2000", "nats-bridge.f.headers=none"])
    stop = threading.Event()
    service = threading.Thread(target=serve_jms, args=(private_amq.url, queue, stop), daemon=True)
    service.start()
    requester = NatsThread(private_nats.url)
    phase = ["warm"]
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()

    async def worker(n: int) -> None:
        # Each outcome is counted under the phase in which the request *ended*: a request caught by the
        # nats-server kill ends in "nats-restart" or later, whenever it started.
        i = 0
        while not stop.is_set():
            i += 1
            try:
                reply = await requester.nc.request(subject, f"{n}-{i}".encode(), timeout=8)
                code = (reply.headers or {}).get("Nats-Service-Error-Code")
                outcomes[(phase[0], f"error-{code}" if code else "ok")] += 1
                if code:
                    await asyncio.sleep(0.05)
            except nats.errors.TimeoutError:
                outcomes[(phase[0], "client-timeout")] += 1
            except nats.errors.Error as exc:
                outcomes[(phase[0], type(exc).__name__)] += 1
                await asyncio.sleep(0.1)

    async def run_workers() -> None:
        await asyncio.gather(*(worker(n) for n in range(4)))

    running = asyncio.run_coroutine_threadsafe(run_workers(), requester.loop)

    def oks(name: str) -> int:
        return outcomes[(name, "ok")]

    try:
        wait_until(lambda: oks("warm") >= 20, timeout=60, what=f"requests answered at first: {outcomes}")
        phase[0] = "activemq-restart"
        private_amq.restart(kill=True)
        phase[0] = "after-activemq"
        wait_until(lambda: oks("after-activemq") >= 20, timeout=120,
                   what=f"requests answered after ActiveMQ came back: {outcomes}\n{bridge.log_tail()}")
        phase[0] = "nats-restart"
        private_nats.kill()
        time.sleep(1.0)
        private_nats.start()
        phase[0] = "after-nats"
        wait_until(lambda: oks("after-nats") >= 20, timeout=120,
                   what=f"requests answered after nats-server came back: {outcomes}\n{bridge.log_tail()}")
    finally:
        stop.set()
        running.result(timeout=30)
        requester.close()
        service.join(30)
    # While NATS was up, the bridge answered every request itself: a reply, or a clear error in its timeout.
    for (name, outcome), count in outcomes.items():
        if name in ("warm", "activemq-restart", "after-activemq"):
            assert outcome in ("ok", "error-503", "error-504"), (name, outcome, count, dict(outcomes))
    assert outcomes[("activemq-restart", "error-503")] + outcomes[("activemq-restart", "error-504")] > 0
    wait_until(lambda: bridge.metric("pending_requests", "f") == 0, timeout=30, what="no request left pending")
    status = bridge.status("f")
    assert status["state"] == "STARTED" and status["jms_connected"] and status["nats_connected"]


@pytest.mark.timeout(120)
def test_with_nats_reconnect_max_the_bridge_stops_with_a_clear_error_once_nats_stays_away(
        stomp_url: str, private_nats: PrivateNats, bridges: Callable[..., BridgeProcess]) -> None:
    bridge = bridges([
        f"bridge.id={unique('nb')}", f"nats.servers={private_nats.url}", "nats.reconnect.wait.ms=100",
        "nats.reconnect.max=3", "nats-bridge.g.type=request-reply", f"nats-bridge.g.source.nats.subject={unique('g')}",
        f"nats-bridge.g.dest.jms.queue={unique('g')}"])
    private_nats.kill()
    assert bridge.proc is not None
    bridge.proc.wait(timeout=90)
    assert bridge.proc.returncode == 1
    assert "nats.reconnect.max=3" in bridge.log_tail()
