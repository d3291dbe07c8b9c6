"""A consumer that behaves on the wire as ToyMB's Java driver (ToyMbReceiver.java), and ToyMB's publish.

It registers a fresh subscriber id at every start, advertised with its address, never
unsubscribes, and answers 500 for a push to an id it does not know.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from tests.support import need_service, wait_until

SOURCE = Path(__file__).with_name("ToyMbReceiver.java")


def compile_receiver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ToyMbReceiver compiled with javac; the folder of its class."""
    need_service(shutil.which("javac") is not None, "a JDK (javac)")
    out = tmp_path_factory.mktemp("toymb-receiver")
    subprocess.run(["javac", "-d", str(out), str(SOURCE)], check=True, timeout=120)
    return out


class JavaReceiver:
    """One run of the Java consumer against the node at ``node_url``, its accepted pushes collected."""

    def __init__(self, classes: Path, node_url: str, topic: str, group: str, port: int) -> None:
        self.got: list[str] = []
        self.sid = ""
        self.proc = subprocess.Popen(["java", "-cp", str(classes), "ToyMbReceiver", node_url, topic, group, str(port)],
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


def send_as_toymb(node_url: str, topic: str, entities: list[str]) -> None:
    """Publish as ToyMB's ToyMBTemplate does: ``/sendmessage``, no token, the entity as a string."""
    session = requests.Session()
    for i, entity in enumerate(entities):
        answer = session.post(f"{node_url}/sendmessage", json={"id": None, "topicName": topic, "key": f"k{i}",
                                                                "body": entity, "requestor": None}, timeout=10)
        assert (answer.status_code, answer.text) == (200, "ack"), answer.text


def dead_lettered(node_url: str, topic: str, headers: dict[str, str] | None = None) -> int:
    """How many messages ``topic``'s dead-letter topic holds."""
    answer = requests.get(f"{node_url}/v1/topics/{topic}.dlq", headers=headers, timeout=10)
    return 0 if answer.status_code == 404 else sum(answer.json()["end_offsets"].values())
