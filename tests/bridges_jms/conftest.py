"""Fixtures of the JMS bridge tests: the shared ActiveMQ (STOMP), a real node, helpers to count.

ActiveMQ is shared with other test folders, so every test uses its own uniquely named queues,
topics and subscriptions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.store import Store
from journal_spark.jms.stompclient import Frame, StompClient
from tests.support import ROOT, NodeProcess, free_port, need_service, port_open, stored_messages

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

STOMP_URL = "stomp://127.0.0.1:61613"
AMQ = str(ROOT / "services" / "activemq.sh")


def amq_up() -> bool:
    return port_open("127.0.0.1", 61613) and port_open("127.0.0.1", 61616)


@pytest.fixture(scope="session")
def activemq() -> str:
    need_service(amq_up(), "ActiveMQ with STOMP on 127.0.0.1:61613 (services/activemq.sh)")
    return STOMP_URL


class PrivateActiveMQ:
    """An ActiveMQ of its own, started by services/activemq.sh in a private state folder and ports.

    For the tests that SIGKILL and restart ActiveMQ: the shared one serves every other test (and
    every xdist worker) meanwhile, so it is never restarted.
    """

    def __init__(self, state: Path, keystore: Path | None = None, keystore_password: str = "") -> None:
        """With ``keystore`` (PKCS12), a stomp+ssl connector listens on ``ssl_port`` too."""
        self.stomp_port, self.openwire_port = free_port(), free_port()
        self.ssl_port = free_port() if keystore else 0
        self.ca_file: Path | None = None   # the certificate that signs the stomp+ssl connector's, if known
        self.url = f"stomp://127.0.0.1:{self.stomp_port}"
        self.env = {**os.environ, "TOYMB_SERVICES_DIR": str(state), "TOYMB_AMQ_HEAP": "-Xmx256M",
                    "TOYMB_AMQ_STOMP_PORT": str(self.stomp_port),
                    "TOYMB_AMQ_OPENWIRE_PORT": str(self.openwire_port)}
        if keystore:
            self.env.update({"TOYMB_AMQ_STOMP_SSL_PORT": str(self.ssl_port), "TOYMB_AMQ_KEYSTORE": str(keystore),
                             "TOYMB_AMQ_KEYSTORE_PASSWORD": keystore_password})

    def _run(self, command: str) -> None:
        done = subprocess.run([AMQ, command], env=self.env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"services/activemq.sh {command}: {done.stderr[-2000:]}"

    def up(self) -> bool:
        return (port_open("127.0.0.1", self.stomp_port) and port_open("127.0.0.1", self.openwire_port)
                and (not self.ssl_port or port_open("127.0.0.1", self.ssl_port)))

    def start(self) -> PrivateActiveMQ:
        self._run("start")
        deadline = time.monotonic() + 60
        while not self.up():
            assert time.monotonic() < deadline, "the private ActiveMQ did not come up"
            time.sleep(0.2)
        return self

    def restart(self, kill: bool = True) -> None:
        """SIGKILL (or stop) it, then start it again and wait until both ports answer."""
        self._run("kill" if kill else "stop")
        self.start()

    def stop(self) -> None:
        self._run("stop")


KEYSTORE_PASSWORD = "toymb-test-secret"


def make_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (PEM) and its PKCS12 keystore for ActiveMQ."""
    key, cert, p12 = folder / f"{name}.key", folder / f"{name}.pem", folder / f"{name}.p12"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    subprocess.run(["openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key), "-out", str(p12),
                    "-passout", f"pass:{KEYSTORE_PASSWORD}", "-name", "activemq"], check=True, capture_output=True)
    return cert, p12


@pytest.fixture(scope="package")
def private_activemq(activemq: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateActiveMQ]:
    """One private ActiveMQ for every test of this folder that needs one (they share the xdist group
    "private-activemq", so one worker runs them all, one after the other): an ActiveMQ start and
    stop cost about 15 s of a JVM's CPU each, so starting it once per module was a minute of the
    suite. It has a stomp+ssl connector too (``ca_file`` signs its certificate). Tests that kill
    and restart it leave it up, and every test uses queues of its own names, so none sees another's
    messages. It needs the shared one installed first.
    """
    folder = tmp_path_factory.mktemp("activemq")
    ca_file, keystore = make_certificate(folder, "server")
    broker = PrivateActiveMQ(folder / "state", keystore=keystore, keystore_password=KEYSTORE_PASSWORD)
    broker.ca_file = ca_file
    broker.start()
    yield broker
    broker.stop()


def unique(prefix: str) -> str:
    return f"toymb.test.{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "node").start()
    yield proc
    proc.stop()


def stored(node: NodeProcess, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` in the node's SQLite store (id, key, headers, content type, body)."""
    store = Store(f"sqlite:///{node.data_dir / 'toymb.db'}")
    try:
        rows = stored_messages(store, topic)
    finally:
        store.dispose()
    return [{"id": r.id, "key": r.key, "headers": json.loads(r.headers), "content_type": r.content_type,
             "body": bytes(r.body), "offset": r.offset, "partition": r.partition} for r in rows]


def stored_count(node: NodeProcess, topic: str) -> int:
    """How many messages ``topic`` holds in the node's SQLite store: what a wait polls, at the cost of
    one COUNT, where :func:`stored` reads and decodes every row (~50 ms of CPU at 5,000)."""
    store = Store(f"sqlite:///{node.data_dir / 'toymb.db'}")
    try:
        return store.count_messages(topic)
    finally:
        store.dispose()


def wait_stored(node: NodeProcess, topic: str, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The messages of ``topic`` once it holds ``count`` (or what it holds after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while stored_count(node, topic) < count and time.monotonic() <= deadline:
        time.sleep(0.1)
    return stored(node, topic)


def connect(client_id: str | None = None, url: str = STOMP_URL) -> StompClient:
    return StompClient(url, client_id=client_id).connect()


def send_all(destination: str, items: list[tuple[bytes, dict[str, str]]], url: str = STOMP_URL) -> None:
    """Send in one transaction, committed with a receipt: all of them are durable on return."""
    client = connect(url=url)
    try:
        for start in range(0, len(items), 2000):
            tx = f"tx-{uuid.uuid4().hex[:8]}"
            client.begin(tx)
            for body, headers in items[start:start + 2000]:
                client.send(destination, body, headers, transaction=tx)
            client.commit(tx)
    finally:
        client.close()


def drain(destination: str, expect: int, idle: float = 2.0, timeout: float = 60.0,
          headers: dict[str, str] | None = None, url: str = STOMP_URL) -> list[Frame]:
    """Consume (and ack) ``destination`` until ``expect`` frames came and then ``idle`` s of silence."""
    client = connect(url=url)
    frames: list[Frame] = []
    try:
        client.subscribe(destination, "drain", ack="client-individual",
                         headers={"activemq.prefetchSize": "500", **(headers or {})})
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            frame = client.receive(0.2)
            if frame is not None:
                frames.append(frame)
                client.ack(frame.headers["ack"])
                last = time.monotonic()
            elif len(frames) >= expect and time.monotonic() - last >= idle:
                break
        client.unsubscribe("drain")
    finally:
        client.close()
    return frames


def write_routes(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
