"""Fixtures of the repository contract suites: each test runs on memory, SQLite, PostgreSQL and MariaDB.

The model is huey's ``StorageTests``: one suite per contract, run unchanged over every
implementation, so the in-memory twins are held to exactly what SQL does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.appender import Appender
from broker.delivery.assignment import assign
from broker.envelope import NewMessage
from broker.partitioning import partition_for
from broker.store import Repositories, Topic, open_repositories


@pytest.fixture(params=["memory", "sqlite", "postgresql", "mariadb"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each contract test runs on the in-memory twin, on SQLite, on PostgreSQL and on MariaDB."""
    if request.param == "memory":
        return f"memory://{tmp_path}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'toymb.db'}"
    # This xdist worker's own database, emptied (a name imported from conftest would be the
    # shared default, read before conftest gives each worker its own).
    return str(request.getfixturevalue("mariadb_url" if request.param == "mariadb" else "pg_url"))


@pytest.fixture
def repos(store_url: str) -> Iterator[Repositories]:
    """The four repositories on one fresh database, as a node opens them."""
    opened = open_repositories(store_url, assign)
    opened.messages.create_schema()
    yield opened
    opened.journal.dispose()
    opened.messages.dispose()


@pytest.fixture
def appender(repos: Repositories) -> Iterator[Appender]:
    """The group-commit writer of ``repos``, started."""
    writer = Appender(repos.messages, max_rows=500)
    writer.start()
    yield writer
    writer.stop()


def message(i: int, key: str, body: bytes = b"x", timestamp: int | None = None) -> NewMessage:
    """Message ``id-<i>`` with ``key`` (which picks its partition) and one header."""
    made = NewMessage(f"id-{i}", key, {"h": str(i)}, "application/octet-stream", body)
    if timestamp is not None:
        made.timestamp = timestamp
    return made


def key_for(partition: int, partitions: int) -> str:
    """A message key that lands in ``partition`` of a topic with ``partitions`` partitions."""
    return next(f"k{n}" for n in range(10_000) if partition_for(f"k{n}", partitions) == partition)


def fill(appender: Appender, topic: Topic, per_partition: dict[int, int], *, first_id: int = 0,
         body: bytes = b"x", timestamp: int | None = None) -> int:
    """Append ``per_partition[p]`` messages to each partition ``p`` of ``topic``; the next unused id."""
    batch = []
    for partition, count in per_partition.items():
        key = key_for(partition, topic.partitions)
        for _ in range(count):
            batch.append(message(first_id + len(batch), key, body, timestamp))
    appender.append(topic, batch)
    return first_id + len(batch)
