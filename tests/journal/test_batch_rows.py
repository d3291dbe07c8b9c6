"""The journal's read path: a micro-batch's rows read by Spark's JDBC reader, from the offsets Spark planned."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store.journal import JournalStore
from broker.store.sql import Store
from journal_spark import batch_rows
from journal_spark.batch_rows import (
    BatchReader,
    UnsupportedStore,
    batch_offsets,
    jdbc_store,
    range_predicate,
    read_ranges_jdbc,
)
from journal_spark.errors import JournalError
from journal_spark.source import INITIAL_OFFSET_FILE, keep_initial_offset, plan_ranges, read_end_offsets
from tests.journal.conftest import fill_store, store_rows


def test_store_urls_become_jdbc_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A relative SQLite path is made absolute: a cluster's executors run in other folders.
    assert jdbc_store("sqlite:///data/toymb.db").url == f"jdbc:sqlite:{tmp_path}/data/toymb.db"
    pg = jdbc_store("postgresql+psycopg://u:p%40ss@db.example:5433/toymb")
    assert pg.url == "jdbc:postgresql://db.example:5433/toymb"
    assert (pg.properties["user"], pg.properties["password"], pg.properties["driver"]) == (
        "u", "p@ss", "org.postgresql.Driver")
    maria = jdbc_store("mysql://u@127.0.0.1/toymb")
    assert maria.url.startswith("jdbc:mariadb://127.0.0.1/toymb?") and "ANSI_QUOTES" in maria.url
    assert "password" not in maria.properties
    for url in ("sqlite://", "sqlite:///:memory:", "oracle://u:p@h/db"):
        with pytest.raises(UnsupportedStore):
            jdbc_store(url)


def test_a_predicate_quotes_what_it_embeds() -> None:
    text = range_predicate([("o'brien", 2, 10, 20), ("b", 0, 0, 5)])
    assert text == ("""(topic = 'o''brien' AND "partition" = 2 AND "offset" >= 10 AND "offset" < 20) OR """
                    """(topic = 'b' AND "partition" = 0 AND "offset" >= 0 AND "offset" < 5)""")


def test_the_jdbc_reader_reads_exactly_the_planned_rows(spark: Any, tmp_path: Path) -> None:
    """Every column as stored (binary bodies, no key, no headers), no row twice, none outside the ranges."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (3, 1500), "audit": (1, 200)})
    start = {"orders": [100, 0, 499], "audit": [0]}
    end = read_end_offsets(JournalStore.of(store))
    groups = plan_ranges(start, end, 3)
    df = read_ranges_jdbc(spark, jdbc_store(url), groups, ordered=True)
    assert df.rdd.getNumPartitions() == len(groups)
    rows = [r.asDict() for r in df.collect()]
    expected = {i: m for i, m in store_rows(store).items()
                if m["offset"] >= start[m["topic"]][m["partition"]]}
    assert len(rows) == len({r["id"] for r in rows}) == len(expected)
    for row in rows:
        want = expected[row["id"]]
        got = {**{k: row[k] for k in want}, "body": bytes(row["body"]), "headers": dict(row["headers"])}
        assert got == want
    # ordered: each task's rows come in (topic, partition, offset) order, as a bridge sends them.
    for part in df.rdd.glom().collect():
        keys = [(r.topic, r.partition, r.offset) for r in part]
        assert keys == sorted(keys)
    assert read_ranges_jdbc(spark, jdbc_store(url), []).count() == 0
    store.dispose()


def test_a_batch_of_more_ranges_than_sqlite_takes_in_one_union_reads_them_or_ed(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite reads a task's ranges as UNION ALL arms up to MAX_UNION_ARMS, past that OR-ed: the same rows."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (4, 400), "audit": (2, 100)})
    planned = plan_ranges({"orders": [10, 0, 50]}, read_end_offsets(JournalStore.of(store)), 2)[0]
    groups = [planned[:3], planned[3:]]   # two tasks (a batch this small is planned as one)
    ranges = len(planned)
    assert len(groups) == 2 and ranges >= 6 and jdbc_store(url).union_ranges

    def read() -> list[tuple[int, str, int, int]]:
        df = read_ranges_jdbc(spark, jdbc_store(url), groups)
        return sorted((task, r.topic, r.partition, r.offset)
                      for task, part in enumerate(df.rdd.glom().collect()) for r in part)

    unioned = read()
    monkeypatch.setattr(batch_rows, "MAX_UNION_ARMS", ranges - 1)
    assert read() == unioned
    want = sorted((task, t, p, o) for task, g in enumerate(groups) for t, p, lo, hi in g for o in range(lo, hi))
    assert unioned == want
    store.dispose()


def test_text_columns_arrive_exactly_as_stored(spark: Any, tmp_path: Path) -> None:
    """SQLite's text is fetched as bytes: non-ASCII names, keys and headers, and a missing key, survive it."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = Store(url)
    store.create_schema()
    topic, _ = store.ensure_topic("tópico-日本", 1)
    appender = Appender(store)
    appender.start()
    appender.append(topic, [NewMessage("ид-1", "ключ-é", {"värde": 'naïve "q" \\ ✓'}, "text/plain; charset=ütf", b"x"),
                            NewMessage("id-2", None, {}, "application/octet-stream", b"\xff\x00")])
    appender.stop()
    groups = plan_ranges({}, read_end_offsets(JournalStore.of(store)), 2)
    rows = {r.id: r.asDict() for r in read_ranges_jdbc(spark, jdbc_store(url), groups).collect()}
    assert rows.keys() == {"ид-1", "id-2"}
    first, second = rows["ид-1"], rows["id-2"]
    assert (first["topic"], first["key"], first["content_type"]) == ("tópico-日本", "ключ-é", "text/plain; charset=ütf")
    assert dict(first["headers"]) == {"värde": 'naïve "q" \\ ✓'}
    assert (second["key"], dict(second["headers"]), bytes(second["body"])) == (None, {}, b"\xff\x00")
    store.dispose()


def test_a_batch_reads_from_the_offset_log(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (2, 300)})
    checkpoint = tmp_path / "ck"
    with pytest.raises(JournalError, match="batch 0"):
        batch_offsets(checkpoint, 0)
    keep_initial_offset(checkpoint, lambda: {"orders": [50, 0]})
    (checkpoint / "offsets").mkdir(parents=True)
    for batch, ends in enumerate(([100, 20], [150, 150])):
        (checkpoint / "offsets" / str(batch)).write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps({"orders": ends}))
    reader = BatchReader(spark, url, checkpoint, tasks=2)
    assert batch_offsets(checkpoint, 1) == ({"orders": [100, 20]}, {"orders": [150, 150]})
    first = {(r.partition, r.offset) for r in reader.read(0).select("partition", "offset").collect()}
    assert first == {(0, o) for o in range(50, 100)} | {(1, o) for o in range(20)}
    second = {(r.partition, r.offset) for r in reader.read(1).select("partition", "offset").collect()}
    stored = {(m["partition"], m["offset"]) for m in store_rows(store).values()}
    assert second == {(p, o) for p, o in stored if (100, 20)[p] <= o < 150}
    store.dispose()


def test_the_initial_offset_is_the_first_answer(tmp_path: Path) -> None:
    """A query restarted before its first batch committed starts where it first said, whatever the store says now."""
    checkpoint = tmp_path / "ck"
    answers = iter([{"a": [1]}, {"a": [7]}])
    assert keep_initial_offset(checkpoint, lambda: next(answers)) == {"a": [1]}
    assert keep_initial_offset(checkpoint, lambda: next(answers)) == {"a": [1]}
    # Concurrent first answers: one wins, and everyone reads the winner's.
    seen: list[Any] = []
    other = tmp_path / "ck2"
    threads = [threading.Thread(target=lambda n=n: seen.append(keep_initial_offset(other, lambda: {"a": [n]})))
               for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({json.dumps(s) for s in seen}) == 1
    assert sorted(p.name for p in other.iterdir()) == [INITIAL_OFFSET_FILE]
