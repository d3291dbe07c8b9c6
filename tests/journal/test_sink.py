"""The store source and the Parquet sink in one shared SparkSession: bounds, ordering, idempotence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.store.journal import JournalStore
from journal_spark.errors import JavaMissing
from journal_spark.job import check_java
from journal_spark.schema import with_header_map
from journal_spark.source import advance, plan_ranges, read_end_offsets, read_ranges
from journal_spark.table import DeltaSink, Fenced
from tests.journal.conftest import assert_journal_matches, fill_store, journal_rows


def test_advance_bounds_rows_and_serves_every_partition() -> None:
    ends = {"a": [100, 0, 5], "b": [1000]}
    first = advance({}, ends, 60)
    assert sum(first["a"]) + sum(first["b"]) == 60
    assert first["a"][2] == 5 and first["a"][1] == 0   # small backlogs are served whole
    assert first["a"][0] > 0 and first["b"][0] > 0     # and the big ones both progress
    position: dict[str, list[int]] = {}
    steps = 0
    while position != ends:
        nxt = advance(position, ends, 60)
        moved = sum(n - position.get(t, [0] * len(parts))[p] for t, parts in nxt.items()
                    for p, n in enumerate(parts))
        assert 0 < moved <= 60
        position, steps = nxt, steps + 1
    assert steps == -(-1105 // 60)
    # Never backwards, even when the store was reset under a checkpoint.
    assert advance({"a": [50]}, {"a": [10]}, 60) == {"a": [50]}


def test_plan_ranges_cover_exactly_once() -> None:
    start, end = {"a": [3, 0]}, {"a": [20003, 7], "b": [12000]}
    groups = plan_ranges(start, end, 4)
    assert 1 < len(groups) <= 4
    covered = sorted((t, p, o) for g in groups for t, p, lo, hi in g for o in range(lo, hi))
    expected = sorted([("a", 0, o) for o in range(3, 20003)] + [("a", 1, o) for o in range(7)]
                      + [("b", 0, o) for o in range(12000)])
    assert covered == expected


def test_sparks_python_workers_import_the_installed_pyspark(spark: Any) -> None:
    """Not the source zip Spark puts first on their path, which each of them would compile again."""
    files = spark.sparkContext.parallelize([0, 1], 2).map(lambda _: __import__("pyspark").__file__).collect()
    assert files and all(".zip" not in f for f in files), files


def test_a_clear_error_without_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nope"))
    with pytest.raises(JavaMissing, match="JAVA_HOME"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissing, match="java"):
        check_java()


def _stream(spark: Any, url: str, checkpoint: Path, max_rows: int, handler: Any) -> None:
    query = (spark.readStream.format("toymb").option("url", url).option("max_rows", str(max_rows))
             .option("start", "earliest").load()
             .writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(handler)
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish"
    assert query.exception() is None, query.exception()


def test_micro_batches_are_bounded_and_complete(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (4, 1700), "audit": (1, 300)})
    seen: list[tuple[int, list[tuple[str, int, int]]]] = []

    def handler(df: Any, batch_id: int) -> None:
        seen.append((batch_id, [(r.topic, r.partition, r.offset) for r in df.select("topic", "partition",
                                                                                   "offset").collect()]))

    _stream(spark, url, tmp_path / "ck", 700, handler)
    assert all(0 < len(rows) <= 700 for _, rows in seen), [len(r) for _, r in seen]
    coordinates = [c for _, rows in seen for c in rows]
    assert len(coordinates) == 2000 == len(set(coordinates))
    # Each partition is read in offset order across batches.
    last: dict[tuple[str, int], int] = {}
    for topic, partition, offset in coordinates:
        assert offset > last.get((topic, partition), -1)
        last[(topic, partition)] = offset
    assert read_end_offsets(JournalStore.of(store)) == {"audit": [300], "orders": [sum(1 for t, p, _ in coordinates
                                                                            if t == "orders" and p == q)
                                                                        for q in range(4)]}


def _batch_frame(spark: Any, url: str) -> Any:
    import pyarrow as pa

    journal = JournalStore(url, pooled=False)
    ends = read_end_offsets(journal)
    ranges = [(t, p, 0, n) for t, parts in ends.items() for p, n in enumerate(parts) if n]
    table = pa.Table.from_batches(list(read_ranges(journal, ranges, page_rows=400)))
    journal.dispose()
    return with_header_map(spark.createDataFrame(table))


def _orders_batches(spark: Any, tmp_path: Path, rows: int,
                    batches: tuple[int, ...]) -> tuple[Any, Any, Path, Path]:
    """A store of ``rows`` messages in each of 2 partitions of ``orders``, those rows as one frame,
    and the journal and checkpoint folders, with ``batches`` in the query's offset log."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (2, rows)})
    frame = _batch_frame(spark, url)
    journal, checkpoints = tmp_path / "journal", tmp_path / "ck"
    for batch in batches:
        _offset_log(checkpoints, batch, url)
    return store, frame, journal, checkpoints


def _versions(journal: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(journal)).version())


def _offset_log(checkpoints: Path, batch_id: int, url: str) -> None:
    """What Spark writes before running a batch: its end offsets, in the query's offset log."""
    ends = read_end_offsets(JournalStore(url, pooled=False))
    folder = checkpoints / DeltaSink.name / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch_id)).write_text("v1\n{}\n" + json.dumps(ends))


def test_a_rerun_batch_is_not_written_twice(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (3, 1200), "audit": (2, 300)})
    frame = _batch_frame(spark, url)
    journal, checkpoints = tmp_path / "journal", tmp_path / "ck"
    _offset_log(checkpoints, 0, url)
    (journal / "_delta_log").mkdir(parents=True)   # a first attempt that died before its commit
    sink = DeltaSink(journal, checkpoints, JournalStore.of(store))
    sink.write_batch(frame, 0)
    first = _versions(journal)
    assert {p.name for p in journal.glob("topic=*")} == {"topic=orders", "topic=audit"}
    # Spark re-runs batch 0 after a crash that hit after the commit: the table does not change.
    DeltaSink(journal, checkpoints, JournalStore.of(store)).write_batch(frame, 0)
    assert _versions(journal) == first
    assert_journal_matches(journal, store)
    ends = read_end_offsets(JournalStore.of(store))
    assert JournalStore.of(store).journaled_offsets() == {(t, p): n for t, parts in ends.items()
                                                          for p, n in enumerate(parts) if n}


def test_a_fenced_writer_cannot_commit(spark: Any, tmp_path: Path) -> None:
    """A paused former leader (lower lease epoch) wakes up: its batch is refused, atomically."""
    store, frame, journal, checkpoints = _orders_batches(spark, tmp_path, 400, (3, 4))
    DeltaSink(journal, checkpoints, JournalStore.of(store), epoch=lambda: 2).write_batch(frame, 3)
    before = _versions(journal)
    with pytest.raises(Fenced, match="epoch 2"):
        DeltaSink(journal, checkpoints, JournalStore.of(store), epoch=lambda: 1).write_batch(frame, 4)
    assert _versions(journal) == before
    assert_journal_matches(journal, store)


def test_a_commit_racing_a_successor_of_the_same_application_is_refused(spark: Any, tmp_path: Path) -> None:
    """A former leader's transaction started before its successor committed: Delta refuses it."""
    from py4j.protocol import Py4JJavaError
    from pyspark.sql import functions as F

    from journal_spark.delta_commit import Append
    from journal_spark.schema import PARTITION_COLUMNS
    from journal_spark.table import DATE_SQL, txn_version

    store, frame, journal, checkpoints = _orders_batches(spark, tmp_path, 300, (0, 1))
    leader = DeltaSink(journal, checkpoints, JournalStore.of(store), epoch=lambda: 1)
    leader.write_batch(frame.where("offset < 100"), 0)
    paused = Append(spark, str(journal), leader.app_id)   # it passed its check, then froze
    successor = DeltaSink(journal, checkpoints, JournalStore.of(store), epoch=lambda: 2)
    successor.write_batch(frame.where("offset >= 100"), 1)
    before = _versions(journal)
    with pytest.raises(Py4JJavaError, match="ConcurrentTransaction"):
        paused.commit(frame.withColumn("date", F.expr(DATE_SQL)), txn_version(1, 1), PARTITION_COLUMNS)
    assert _versions(journal) == before
    assert_journal_matches(journal, store)


def test_an_append_does_not_rebuild_the_tables_state(spark: Any, tmp_path: Path) -> None:
    """A batch into an existing table runs one Spark job (its write): no state replay for txnAppId."""
    store, frame, journal, checkpoints = _orders_batches(spark, tmp_path, 300, (0, 1))
    frame = frame.cache()
    frame.count()
    sink = DeltaSink(journal, checkpoints, JournalStore.of(store))
    sink.write_batch(frame.where("offset < 100"), 0)
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    jobs = scheduler.nextJobId()
    sink.write_batch(frame.where("offset >= 100"), 1)
    assert scheduler.nextJobId() - jobs == 1
    frame.unpersist()
    assert_journal_matches(journal, store)


def test_the_log_is_checkpointed_off_the_commit_path(spark: Any, tmp_path: Path) -> None:
    """No commit checkpoints the log; the sink does, in the background, every ``checkpoint_every``
    versions, and Spark and delta-rs read the table through that checkpoint."""
    from deltalake import DeltaTable

    from journal_spark.table import COMMIT_CHECKPOINT_INTERVAL

    store, frame, journal, checkpoints = _orders_batches(spark, tmp_path, 400, (0, 1, 2, 3, 4))
    sink = DeltaSink(journal, checkpoints, JournalStore.of(store), checkpoint_every=2)
    for batch in range(4):
        sink.write_batch(frame.where(f"offset >= {40 * batch} AND offset < {40 * (batch + 1)}"), batch)
        sink.wait_for_checkpoint(60)
    log = journal / "_delta_log"
    assert DeltaTable(str(journal)).metadata().configuration["delta.checkpointInterval"] == COMMIT_CHECKPOINT_INTERVAL
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == ["00000000000000000002.checkpoint.parquet"]
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 2
    # Spark's log reader takes the new checkpoint up with the next append; the table reads whole.
    sink.write_batch(frame.where("offset >= 160"), 4)
    sink.wait_for_checkpoint(60)
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet"))[-1] == "00000000000000000004.checkpoint.parquet"
    assert spark.read.format("delta").load(str(journal)).count() == store.count_messages()
    assert_journal_matches(journal, store)


def test_the_table_is_readable_without_spark_while_a_batch_is_uncommitted(spark: Any, tmp_path: Path) -> None:
    """A batch's data files written but not committed (a crash before the log entry) are not seen."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = fill_store(url, {"orders": (2, 500)})
    frame = _batch_frame(spark, url)
    journal, checkpoints = tmp_path / "journal", tmp_path / "ck"
    _offset_log(checkpoints, 0, url)
    DeltaSink(journal, checkpoints, JournalStore.of(store)).write_batch(frame, 0)
    # A crashed attempt's files: plain Parquet beside the committed ones, named in no commit.
    frame.write.mode("append").parquet(str(journal / "topic=orders" / "date=2099-01-01"))
    assert_journal_matches(journal, store)


def test_compaction_and_retention_keep_the_batches_exactly_once(spark: Any, tmp_path: Path) -> None:
    """Delta's DELETE (old days), OPTIMIZE and VACUUM, while the idempotence marks survive."""
    import random

    from broker.appender import Appender
    from broker.store.sql import Store
    from journal_spark.maintenance import compact
    from tests.journal.conftest import sample_message

    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = Store(url)
    store.create_schema()
    appender = Appender(store)
    appender.start()
    topic, _ = store.ensure_topic("orders", 2)
    rng = random.Random(3)
    appender.append(topic, [sample_message(i, rng, timestamp=1_600_000_000_000 + i) for i in range(300)])
    appender.append(topic, [sample_message(300 + i, rng) for i in range(200)])
    appender.stop()
    frame = _batch_frame(spark, url)
    journal, checkpoints = tmp_path / "journal", tmp_path / "ck"
    for batch in range(3):
        _offset_log(checkpoints, batch, url)
        DeltaSink(journal, checkpoints, JournalStore.of(store)).write_batch(frame.where(f"offset % 3 = {batch}"),
                                                                         batch)
    done = compact(journal, keep_days=30, vacuum_hours=0)
    assert done.deleted_rows == 300
    assert done.files_removed > done.files_added >= 1
    assert done.vacuumed >= done.files_removed
    rows = journal_rows(journal)
    assert sorted(r["id"] for r in rows) == [f"id-{i:06d}" for i in range(300, 500)]
    sink = DeltaSink(journal, checkpoints, JournalStore.of(store))
    version = _versions(journal)
    sink.write_batch(frame, 2)   # a re-run of the last batch is still recognised
    assert _versions(journal) == version


def test_a_bridge_sees_each_driver_row_as_a_dict_of_its_columns(spark: Any, tmp_path: Path) -> None:
    """driver_rows (the bridges' view of a micro-batch) gives every row, each column's value as Spark's."""
    from journal_spark.bridges.sink import driver_rows

    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    fill_store(url, {"orders": (2, 150)})
    frame = _batch_frame(spark, url)
    rows = list(driver_rows(frame))
    assert rows == [row.asDict() for row in frame.toLocalIterator()]
    assert len(rows) == 150 and set(rows[0]) == set(frame.columns)
    assert isinstance(rows[0]["headers"], dict) and rows[0]["topic"] == "orders"
