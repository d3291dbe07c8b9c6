"""ToyMB's Java driver restarted, as its users restart apps all the time: nothing is lost and
nothing is dead-lettered.

The consumer is a Java program (ToyMbReceiver.java, compiled here with javac) that does on the
wire what ToyMB-client does: a fresh subscriber id at every start, advertised with its address,
never an unsubscribe, and a 500 for a push to an id it does not know.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import NodeProcess, free_port, need_service, wait_until

SOURCE = Path(__file__).with_name("ToyMbReceiver.java")
LEASE_MS = 2000


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_service(shutil.which("javac") is not None, "a JDK (javac)")
    out = tmp_path_factory.mktemp("toymb-receiver")
    subprocess.run(["javac", "-d", str(out), str(SOURCE)], check=True, timeout=120)
    return out


class JavaReceiver:
    """One run of the Java consumer, its accepted pushes collected from its output."""

    def __init__(self, classes: Path, node: NodeProcess, topic: str, group: str, port: int) -> None:
        self.got: list[str] = []
        self.sid = ""
        self.proc = subprocess.Popen(["java", "-cp", str(classes), "ToyMbReceiver", node.url, topic, group, str(port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: self.sid or self.proc.poll() is not None, timeout=60, what="the Java consumer registered")
        assert self.sid, f"the Java consumer did not register: {self.got}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("REGISTERED "):
                self.sid = line.split(" ", 1)[1].strip()
            elif line.startswith("GOT "):
                self.got.append(line[4:].strip())
            else:
                self.got.append(f"(output) {line.strip()}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    # A short lease, so that the receiver abandoned at its old port is dropped within the test.
    started = NodeProcess(tmp_path / "node", env={"TOYMB_SUBSCRIBER_LEASE_MS": str(LEASE_MS),
                                                   "TOYMB_PUSH_BACKOFF_MAX_MS": "500"}).start()
    yield started
    started.stop()


def _send(node: NodeProcess, topic: str, entities: list[str]) -> None:
    session = requests.Session()
    for i, entity in enumerate(entities):
        answer = session.post(f"{node.url}/sendmessage", json={"id": None, "topicName": topic, "key": f"k{i}",
                                                                 "body": entity, "requestor": None}, timeout=10)
        assert (answer.status_code, answer.text) == (200, "ack")


def _dead_lettered(node: NodeProcess, topic: str) -> int:
    answer = requests.get(f"{node.url}/v1/topics/{topic}.dlq", timeout=10)
    return 0 if answer.status_code == 404 else sum(answer.json()["end_offsets"].values())


@pytest.mark.timeout(300)
def test_restarted_toymb_consumers_lose_nothing_on_the_same_port_or_a_new_one(classes: Path,
                                                                            node: NodeProcess) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", "billing"
    port = free_port()
    ids = set()
    for phase, listen in enumerate([port, port, free_port()]):
        app = JavaReceiver(classes, node, topic, group, listen)
        ids.add(app.sid)
        try:
            entities = [f"phase{phase}-m{i}" for i in range(50)]
            _send(node, topic, entities)
            wait_until(lambda: set(entities) <= set(app.got), timeout=90,  # noqa: B023
                       what=f"phase {phase}: all 50 pushed to the restarted consumer")
        finally:
            app.kill()
        assert _dead_lettered(node, topic) == 0, f"phase {phase} dead-lettered messages\n{node.log_tail(30)}"
    assert len(ids) == 3, "each start registered a fresh id, as ToyMB's driver does"
    members = requests.get(f"{node.url}/v1/topics/{topic}/groups/{group}", timeout=10).json()["subscribers"]
    assert len(members) <= 2, "the id a restart on the same port replaced is gone"
