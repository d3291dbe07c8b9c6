"""Helpers of the Kafka bridge tests: real Kafka on 127.0.0.1:9092 (services/kafka.sh)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import need_service, port_open

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

BOOTSTRAP = os.environ.get("TOYMB_TEST_KAFKA", "127.0.0.1:9092")


@pytest.fixture(scope="session")
def kafka() -> str:
    host, _, port = BOOTSTRAP.rpartition(":")
    need_service(port_open(host, int(port)), f"Kafka on {BOOTSTRAP}")
    return BOOTSTRAP


@pytest.fixture
def names() -> Iterator[Any]:
    """Unique topic names for one test; the topics are deleted afterwards."""
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        made.append(name)
        return name

    yield make
    if made:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        existing = admin.list_topics(timeout=10).topics
        doomed = [n for n in made if n in existing]
        if doomed:
            for future in admin.delete_topics(doomed).values():
                try:
                    future.result(timeout=30)
                except Exception:  # noqa: BLE001 - best effort cleanup
                    pass


def create_topics(*topics: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
    futures = admin.create_topics(new)
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while not all(t in admin.list_topics(timeout=10).topics for t in topics):
        assert time.monotonic() < deadline, f"topics {topics} did not appear"
        time.sleep(0.2)


def consume_all(topic: str, *, expect: int | None = None, read_committed: bool = True,
                idle_s: float = 3.0, timeout_s: float = 90.0) -> list[Any]:
    """Every record of ``topic`` from the beginning (stops after ``expect`` records, or when idle)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"test-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    consumer.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.5)
            for msg in batch:
                if msg.error() is None:
                    records.append(msg)
            if batch:
                last = time.monotonic()
            if expect is not None and len(records) >= expect:
                # read on a little: a duplicate would show up right after
                if time.monotonic() - last > 1.0:
                    break
            elif expect is None and time.monotonic() - last > idle_s:
                break
    finally:
        consumer.close()
    return records


def routes_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"routes-{uuid.uuid4().hex[:6]}.properties"
    path.write_text(f"kafka.bootstrap.servers={BOOTSTRAP}\n" + text)
    return path
