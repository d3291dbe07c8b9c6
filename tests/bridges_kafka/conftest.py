"""Helpers of the Kafka bridge tests: real Kafka on 127.0.0.1:9092 (services/kafka.sh)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support import need_service, port_open

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

BOOTSTRAP = os.environ.get("TOYMB_TEST_KAFKA", "127.0.0.1:9092")

T = TypeVar("T")

# Answers a healthy single-broker Kafka gives while it settles: a new topic's leader is still being
# elected, a coordinator is loading, a request raced a metadata refresh. Nothing else is retried.
TRANSIENT_KAFKA_ERRORS = frozenset({
    "NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART", "NOT_COORDINATOR",
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "REQUEST_TIMED_OUT", "_TIMED_OUT",
    "_TRANSPORT", "_WAIT_COORD", "NOT_ENOUGH_REPLICAS",
})


def kafka_retry(call: Callable[[], T], what: str, *, attempts: int = 40, pause_s: float = 0.25) -> T:
    """``call()``, retried while Kafka answers one of TRANSIENT_KAFKA_ERRORS (at most ``attempts`` times).

    For the tests' own probes of Kafka (offsets, metadata), never for the behaviour under test.
    """
    from confluent_kafka import KafkaException

    for attempt in range(1, attempts + 1):
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if error.name() not in TRANSIENT_KAFKA_ERRORS:
                raise
            if attempt == attempts:
                raise AssertionError(f"{what}: Kafka still answered {error.name()} after {attempts} tries") from exc
            time.sleep(pause_s)
    raise AssertionError("unreachable")


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
    def led(topic: str) -> bool:
        """Every partition of ``topic`` has an elected leader (clients would be told NOT_LEADER until then)."""
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or len(meta.partitions) != partitions:
            return False
        return all(p.leader >= 0 and p.error is None for p in meta.partitions.values())

    deadline = time.monotonic() + 30
    while not all(led(t) for t in topics):
        assert time.monotonic() < deadline, f"topics {topics} did not get a leader for every partition"
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


def append_orders(appender: Any, orders: Any, noise: Any, start: int, count: int) -> None:
    """Append orders ``m-<start>`` .. (routed: key ``c-<i % 97>``, a JMS type) and one unrouted noise message."""
    from broker.envelope import NewMessage

    appender.append(orders, [NewMessage(f"m-{i:05d}", f"c-{i % 97}", {"n": str(i), "jms.JMSType": "order"},
                                        "text/plain", f"order {i}".encode()) for i in range(start, start + count)])
    appender.append(noise, [NewMessage(f"x-{start}", None, {}, "text/plain", b"not routed")])
