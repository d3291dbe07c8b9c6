"""Fixtures of the journal tests: one shared SparkSession, and stores filled fast in-process."""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store.sql import Store
from tests.bridges_kafka.conftest import kafka, names  # noqa: F401 - fixtures of the takeover test
from tests.support import stored_messages

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def sample_message(i: int, rng: random.Random, timestamp: int | None = None) -> NewMessage:
    """A message with a key (mostly), headers and a JSON, text or binary (non UTF-8) body."""
    kind = i % 3
    if kind == 0:
        body, ctype = json.dumps({"n": i, "s": "é" * (i % 5)}).encode(), "application/json"
    elif kind == 1:
        body, ctype = f"text {i}".encode(), "text/plain"
    else:
        body = bytes([0xFF, 0x00, i % 256]) + rng.randbytes(rng.randint(0, 40))
        ctype = "application/octet-stream"
    key = None if i % 7 == 0 else f"k{rng.randint(0, 500)}"
    headers = {} if i % 5 == 0 else {"n": str(i), "trace": f"t-{rng.randint(0, 1 << 30)}"}
    message = NewMessage(f"id-{i:06d}", key, headers, ctype, body)
    if timestamp is not None:
        message.timestamp = timestamp
    return message


def fill_store(url: str, topics: dict[str, tuple[int, int]], seed: int = 7) -> Store:
    """Publish ``{topic: (partitions, count)}`` through the broker's group-commit writer."""
    rng = random.Random(seed)
    store = Store(url)
    store.create_schema()
    appender = Appender(store)
    appender.start()
    try:
        base = 0
        for name, (partitions, count) in topics.items():
            topic, _ = store.ensure_topic(name, partitions)
            for start in range(0, count, 1000):
                batch = [sample_message(base + i, rng) for i in range(start, min(count, start + 1000))]
                appender.append(topic, batch)
            base += count
    finally:
        appender.stop()
    return store


def store_rows(store: Store) -> dict[str, dict[str, Any]]:
    """Every stored message by id, as raw column values."""
    return {r.id: {"topic": r.topic, "partition": r.partition, "offset": r.offset, "key": r.key,
                   "headers": json.loads(r.headers), "content_type": r.content_type,
                   "body": bytes(r.body), "timestamp": r.timestamp}
            for r in stored_messages(store)}


def journal_rows(journal_dir: Path) -> list[dict[str, Any]]:
    """Every row of the Delta journal table, read without Spark (delta-rs, the ``deltalake`` package)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(journal_dir))
    except TableNotFoundError:
        return []   # no commit yet
    rows: list[dict[str, Any]] = table.to_pyarrow_table().to_pylist()
    for row in rows:
        row["headers"] = dict(row["headers"] or [])
    return rows


def assert_journal_matches(journal_dir: Path, store: Store) -> None:
    """Each stored message is in the journal exactly once, with all its fields."""
    expected = store_rows(store)
    rows = journal_rows(journal_dir)
    ids = [r["id"] for r in rows]
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not duplicates, f"{len(ids) - len(set(ids))} duplicate rows, e.g. {duplicates[:5]}"
    assert set(ids) == set(expected), (f"missing {len(set(expected) - set(ids))}, "
                                       f"unexpected {len(set(ids) - set(expected))}")
    for row in rows:
        want = expected[row["id"]]
        got = {k: row[k] for k in want}
        assert got == want, f"journal row {row['id']} differs: {got} != {want}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the in-process tests (starting one takes seconds)."""
    from journal_spark.job import build_session

    session = build_session("local[2]", app_name="toymb-journal-tests")
    yield session
    session.stop()
