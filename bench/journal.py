"""Journal benchmark: store -> Delta table throughput against Spark's own ceiling, and the lag.

1. Throughput, as users run the journal (``bench.journal_running``, the figure held to the 0.6
   target). One long-running query with the job's processingTime trigger, already running and
   caught up (it drained a warm-up backlog and idles), is handed a backlog of N rows (in a SQLite
   store) at once and drains it in ``journal_max_rows`` batches; the time is its batches' (Spark's
   ``triggerExecution``, summed), measured after the fresh queries below, in the warmest JVM, as
   a journal that has been running is. The ceiling: Spark writing the same rows from a cached DataFrame
   (``df.write.format("delta").partitionBy("topic", "date")``, same format, same layout) in the same
   JVM right after. Ratio = ceiling time / journal time.
2. The same, in a fresh query (``availableNow``, started for the measurement, as before), reported
   beside it, and with the backlog in one micro-batch. A fresh query pays, inside the batches it
   times, costs that a running journal pays once: its streaming source's Python runner starting
   (1.25 to 1.9 CPU-s a query) and HotSpot's C2 compiling Spark's planning for the new query (1 to
   2 CPU-s); on the 2-core machine they run beside the measured batches. ``toymb journal run``
   starts its query once, so the running query's figure is the one users get; the fresh query's
   shows what starting one costs.
3. Lag. A writer publishes at a steady rate through the broker's group-commit appender while the
   journal runs with its default trigger; every message's lag, from its publish's acknowledgement
   to the journal's record of it (``bench.journal_lag``).

Peak RSS covers this process (the Spark driver's Python side) and the JVM with its Python workers.
Run: ``toymb bench --only journal [--quick]`` or ``python -m bench.journal [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import own_peak_rss_mb, report, write_results
from bench.journal_lag import measure as measure_lag
from bench.journal_lag import tree_cpu_s
from broker import config
from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store import Store
from broker.store.journal import JournalStore
from journal_spark.schema import with_header_map

TOPICS = {"orders": 16, "audit": 4}


def _messages(start: int, count: int) -> list[NewMessage]:
    body = b'{"order":%d,"lines":[1,2,3],"note":"' + b"x" * 160 + b'"}'
    return [NewMessage(f"m-{i}", f"customer-{i % 997}", {"seq": str(i), "source": "bench"},
                       "application/json", body % i) for i in range(start, start + count)]


def fill_store(store: Store, per_topic: int, first: int = 0) -> None:
    """Publish ``per_topic`` messages to each topic, numbered from ``first`` (their ids, ``m-<n>``)."""
    appender = Appender(store)
    appender.start()
    try:
        for name, partitions in TOPICS.items():
            topic, _ = store.ensure_topic(name, partitions)
            for start in range(first, first + per_topic, 2000):
                appender.append(topic, _messages(start, min(2000, first + per_topic - start)))
    finally:
        appender.stop()


def _tree_rss_mb() -> float:
    """Current resident memory of this process and all its descendants (JVM, Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


class RssSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.peak = max(self.peak, _tree_rss_mb())


def _journal_once(spark: Any, settings: config.Settings, checkpoint: Path) -> tuple[float, float]:
    """Drain the store into the Delta table; returns (wall seconds, seconds spent in micro-batches)."""
    from journal_spark.job import journal_stream
    from journal_spark.table import DeltaSink

    journal = JournalStore(settings.effective_database_url, pooled=False)
    sink = DeltaSink(settings.effective_journal_dir, checkpoint, journal)
    sink.start = "earliest"
    started = time.perf_counter()
    query = journal_stream(spark, settings.effective_database_url, checkpoint.resolve() / DeltaSink.name, sink,
                           max_rows=settings.journal_max_rows).trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"journal query failed: {query.exception()}")
    # The source plans and reads no rows (numInputRows is 0): a batch with work moved its offsets.
    progress = [p for p in query.recentProgress if p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"]]
    if os.environ.get("TOYMB_BENCH_VERBOSE"):
        for p in progress:
            print("journal batch", p["batchId"], p["timestamp"], p["durationMs"])
    # recentProgress keeps the last 100 batches; the bench's runs have fewer.
    batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    journal.dispose()
    return elapsed, batches


def spark_ceiling(spark: Any, url: str, out: Path,
                  start: dict[str, list[int]] | None = None) -> tuple[float, float, int, float]:
    """Spark writing the same rows from a DataFrame, laid out as the journal does.

    Two ceilings: the strict one writes a cached, materialised DataFrame (only the Delta write
    is timed, with its CPU: this process and the JVM); the second times ``createDataFrame(rows)``
    from memory plus the write. The rows are the store's, from ``start`` (source offsets; default
    the first) to its end offsets.
    """
    import pyarrow as pa
    from pyspark.sql import functions as F

    from journal_spark.source import read_end_offsets, read_ranges

    journal = JournalStore(url, pooled=False)
    ranges: list[tuple[str, int, int, int]] = []
    for t, ends in read_end_offsets(journal).items():
        begun = (start or {}).get(t, [])
        ranges.extend((t, p, begun[p] if p < len(begun) else 0, n) for p, n in enumerate(ends))
    ranges = [r for r in ranges if r[3] > r[2]]
    table = pa.Table.from_batches(list(read_ranges(journal, ranges)))
    journal.dispose()

    def write(df: Any, where: Path) -> None:
        (df.withColumn("date", F.date_format(F.timestamp_millis(F.col("timestamp")), "yyyy-MM-dd"))
           .write.format("delta").mode("overwrite").partitionBy("topic", "date").save(str(where)))

    started = time.perf_counter()
    write(with_header_map(spark.createDataFrame(table)), out / "created")
    created = time.perf_counter() - started
    df = (with_header_map(spark.createDataFrame(table))
          .repartition(spark.sparkContext.defaultParallelism).cache())
    rows = df.count()
    cpu, started = tree_cpu_s(), time.perf_counter()
    write(df, out / "cached")
    elapsed, cpu = time.perf_counter() - started, tree_cpu_s() - cpu
    df.unpersist()
    return elapsed, created, rows, cpu


# Delta's defaults that journal_spark.job.with_delta changes for small, frequent commits.
DELTA_DEFAULTS: dict[str, str | None] = {"spark.databricks.delta.snapshotPartitions": "50",
                  "spark.databricks.delta.writeChecksumFile.enabled": "true",
                  # A table property's default: it counts when the table is created (its first batch).
                  "spark.databricks.delta.properties.defaults.checkpointInterval": "10",
                  "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": None}   # None: unset


def _configure(spark: Any, settings: dict[str, str | None]) -> None:
    for key, value in settings.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _per_batch_cost(spark: Any, root: Path, batches: int) -> dict[str, Any]:
    """Median seconds (wall and CPU of the whole process tree) of one 1,000-row micro-batch commit:
    the journal's (its Delta settings, a transaction carrying ``SetTransaction`` with no state
    rebuild, see ``journal_spark.delta_commit``) against Delta's writer with ``txnAppId`` and
    Delta's defaults; interleaved batch by batch into two tables so load drift hits both alike."""
    import statistics

    from pyspark.sql import functions as F

    from journal_spark.delta_commit import Append
    from journal_spark.schema import PARTITION_COLUMNS

    tuned: dict[str, str | None] = {k: spark.conf.get(k, None) for k in DELTA_DEFAULTS}
    df = spark.range(1000).selectExpr(
        "cast(id as string) as id", "'orders' as topic", "cast(id % 16 as int) as partition", "id as offset",
        "cast(1764000000000 + id as long) as timestamp", "repeat('x', 200) as body").cache()
    df.count()
    dated = df.withColumn("date", F.date_format(F.timestamp_millis(F.col("timestamp")), "yyyy-MM-dd"))
    times: dict[str, list[tuple[float, float]]] = {"tuned": [], "defaults": []}
    try:
        for batch in range(batches):
            for name, settings in (("tuned", tuned), ("defaults", DELTA_DEFAULTS)):
                _configure(spark, settings)
                table = root / f"cost-{name}"
                cpu, started = tree_cpu_s(), time.perf_counter()
                if name == "tuned" and batch > 0:
                    Append(spark, str(table), "bench").commit(dated, batch, PARTITION_COLUMNS)
                else:
                    (dated.write.format("delta").mode("append").partitionBy(*PARTITION_COLUMNS)
                     .option("txnAppId", "bench").option("txnVersion", str(batch)).save(str(table)))
                times[name].append((time.perf_counter() - started, tree_cpu_s() - cpu))
    finally:
        _configure(spark, tuned)
        df.unpersist()
    steady = {name: values[2:] or values for name, values in times.items()}   # the first two warm the JIT
    result: dict[str, Any] = {}
    for name, values in steady.items():
        result[f"{name}_median_s"] = statistics.median(wall for wall, _ in values)
        result[f"{name}_median_cpu_s"] = statistics.median(cpu for _, cpu in values)
    result["ratio_tuned_vs_defaults"] = result["tuned_median_s"] / result["defaults_median_s"]
    return result


def _throughput(spark: Any, root: Path, per_topic: int, max_rows: int) -> dict[str, Any]:
    data = root / f"tp-{per_topic}"
    settings = config.load(env={}, overrides={"data_dir": str(data), "journal_max_rows": max_rows})
    store = Store(settings.effective_database_url)
    store.create_schema()
    fill_store(store, per_topic)
    rows = store.count_messages()
    store.dispose()
    cpu = tree_cpu_s()
    wall_s, batches_s = _journal_once(spark, settings, data / "checkpoints")
    journal_cpu = tree_cpu_s() - cpu
    ceiling_s, created_s, ceiling_rows, ceiling_cpu = spark_ceiling(spark, settings.effective_database_url,
                                                               data / "ceiling")
    assert ceiling_rows == rows
    shutil.rmtree(data, ignore_errors=True)
    return {"rows": rows, "max_rows": max_rows, "journal_wall_s": wall_s, "journal_batches_s": batches_s,
            "ceiling_s": ceiling_s, "ceiling_created_s": created_s, "journal_rows_per_s": rows / batches_s,
            "ceiling_rows_per_s": rows / ceiling_s, "ratio": ceiling_s / batches_s,
            "ratio_with_query_start": ceiling_s / wall_s, "ratio_vs_created": created_s / batches_s,
            # Load-independent: CPU-seconds of this process and the JVM (with any Python workers).
            "journal_cpu_s_per_1000_rows": 1000 * journal_cpu / rows,
            "ceiling_cpu_s_per_1000_rows": 1000 * ceiling_cpu / rows}


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    """Measure, print and save (``journal.json``, ``journal.png``) the journal's figures."""
    from journal_spark.job import build_session

    root = Path(tempfile.mkdtemp(prefix="toymb-bench-journal-"))
    sampler = RssSampler()
    sampler.start()
    per_topic = 50_000 if quick else 150_000
    max_rows = config.load(env={}).journal_max_rows
    try:
        spark = build_session("local[*]", app_name="toymb-bench-journal")
        from bench.journal_running import measure as measure_running

        walls = [time.perf_counter()]   # each part's wall time, for the bench's own cost
        # Warm-up: the JIT (big batches run code small ones do not), Python workers, the table state.
        _throughput(spark, root, per_topic // 5, max_rows)
        walls.append(time.perf_counter())
        tp = _throughput(spark, root, per_topic, max_rows)
        walls.append(time.perf_counter())
        big = _throughput(spark, root, per_topic + 1, 2 * per_topic)  # one micro-batch: no per-batch cost
        walls.append(time.perf_counter())
        # Last, in the warmest JVM, as a journal that has been running is: the first 300,000-row
        # run of a JVM is the slowest whichever query makes it (bench.journal_running).
        running = measure_running(spark, root, per_topic // 5, per_topic, max_rows)
        walls.append(time.perf_counter())
        cost = _per_batch_cost(spark, root, 6 if quick else 12)
        walls.append(time.perf_counter())
        lag = measure_lag(root, rate=1_000 if quick else 3_000, seconds=15 if quick else 40, warmup=5)
        walls.append(time.perf_counter())
        spark.stop()
    finally:
        sampler.stopped.set()
        shutil.rmtree(root, ignore_errors=True)
    results = {
        "rows": running["rows"], "journal_max_rows": max_rows, "throughput_running": running,
        "throughput": tp, "throughput_one_batch": big,
        "journal_rows_per_s": running["journal_rows_per_s"], "ceiling_rows_per_s": running["ceiling_rows_per_s"],
        "throughput_ratio": running["ratio"], "throughput_ratio_fresh_query": tp["ratio"],
        "throughput_ratio_one_batch": big["ratio"],
        "lag": lag,
        "per_batch_cost": cost,
        "peak_rss_driver_mb": own_peak_rss_mb(), "peak_rss_tree_mb": max(sampler.peak, _tree_rss_mb()),
        "target_ratio": 0.6, "quick": quick,
        "parts_wall_s": dict(zip(("warm_up", "fresh_query", "one_batch", "running", "per_batch_cost", "lag"),
                                 (b - a for a, b in zip(walls, walls[1:], strict=False)), strict=True)),
    }
    report("journal: store -> Delta table", {
        "rows": running["rows"],
        f"running journal rows/s ({max_rows}-row batches)": running["journal_rows_per_s"],
        "Spark DataFrame -> Delta rows/s (ceiling)": running["ceiling_rows_per_s"],
        "ratio running journal / ceiling, median of rounds (target >= 0.6)": running["ratio"],
        "  each round's ratio": ", ".join(f"{r['ratio']:.3f}" for r in running["rounds"]),
        "  total ceiling time / total journal time": running["ratio_of_sums"],
        "  each round's batches (trigger)": f"{running['rounds'][0]['batches']} ({running['trigger_ms']} ms)",
        "  same, wall from its first batch's start to its last's end": running["ratio_wall"],
        "  CPU of the idle query while the ceiling runs (cores)": running["idle_cpu_cores"],
        "  running journal vs createDataFrame + write": running["ratio_vs_created"],
        "  CPU-s per 1,000 rows, running journal (driver + JVM)": running["journal_cpu_s_per_1000_rows"],
        "  CPU-s per 1,000 rows, its ceiling (driver + JVM)": running["ceiling_cpu_s_per_1000_rows"],
        "same, in a fresh query (availableNow): ratio": tp["ratio"],
        "  its journal rows/s, ceiling rows/s": f"{tp['journal_rows_per_s']:,.0f}, {tp['ceiling_rows_per_s']:,.0f}",
        "  same, counting the query's start-up (~1 s)": tp["ratio_with_query_start"],
        "  vs createDataFrame + write": tp["ratio_vs_created"],
        "  CPU-s per 1,000 rows, journal (driver + JVM)": tp["journal_cpu_s_per_1000_rows"],
        "  CPU-s per 1,000 rows, ceiling (driver + JVM)": tp["ceiling_cpu_s_per_1000_rows"],
        "fresh query, the backlog in one micro-batch": big["ratio"],
        "  same, vs createDataFrame + write": big["ratio_vs_created"],
        "1,000-row batch commit, the journal's (s, median)": cost["tuned_median_s"],
        "  its CPU, process tree (s, median)": cost["tuned_median_cpu_s"],
        "  same, Delta's writer with txnAppId and defaults (s, median)": cost["defaults_median_s"],
        "  CPU of that, process tree (s, median)": cost["defaults_median_cpu_s"],
        f"lag per message at {lag['rate_msgs_per_s']} msg/s, trigger {lag['trigger_ms']} ms: p50 s": lag["lag_p50_s"],
        "lag p95 seconds (target <= 1)": lag["lag_p95_s"], "lag max seconds": lag["lag_max_s"],
        "journal CPU while lagging (cores)": lag["cpu_s_per_s"],
        "drain after publishing stops (s)": lag["drain_after_stop_s"],
        "peak RSS driver (MiB)": results["peak_rss_driver_mb"],
        "peak RSS driver + JVM + workers (MiB)": results["peak_rss_tree_mb"],
    })
    write_results(out_dir, "journal", results, bars={
        f"running journal / Spark ceiling ({max_rows}-row batches)": running["ratio"],
        "running journal / createDataFrame+write": running["ratio_vs_created"],
        "fresh query / Spark ceiling": tp["ratio"],
        "fresh query, one micro-batch / Spark ceiling": big["ratio"],
        "fresh query, one micro-batch / createDataFrame+write": big["ratio_vs_created"]})
    return results

if __name__ == "__main__":
    run(quick="--quick" in sys.argv, out_dir=Path("bench/out"))
