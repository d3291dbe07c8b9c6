"""The journal's throughput as users run it: one long-running query that is handed a backlog.

``toymb journal run`` starts one streaming query (processingTime trigger,
``journal_trigger_ms``) and keeps it. A fresh ``availableNow`` query per measurement
(``bench.journal._journal_once``) also pays, inside the batches it times, what such a journal pays
once: the streaming source's Python runner starting (1.25 to 1.9 CPU-s a query) and HotSpot's C2
compiling Spark's planning for the new query (1 to 2 CPU-s); on 2 cores these run beside the
measured batches and slow them.

Here the store is filled before the query starts: a warm-up backlog, then ``ROUNDS`` backlogs of
the measured rows after it in every partition. The partitions' end offsets
(``toymb_partitions.next_offset``, all the source reads to plan) are then set back to the
warm-up's, so the query sees only that. It drains it, the ceiling's code is warmed on the same
rows, and the query sits idle for a few triggers. Then, each round, one transaction sets the end
offsets to the round's: the next trigger finds the round's whole backlog at once (never half of
it), and the query drains it in ``journal_max_rows`` batches. Timed: the batches that carried it
(Spark's ``triggerExecution``, summed) and the wall time from the first one's start to the last
one's end; CPU of the process tree from the revealing commit to the last batch's progress. Right
after, the ceiling writes the same rows, with the query still running and idle (its idle
triggers' CPU, measured before each round, is reported: a few hundredths of a core). The figure
is the median of the rounds' ratios, every round's printed: one drain of 300,000 rows takes about
two seconds, and on the shared 2-core machine a single pair swung 0.53-0.70 between runs.
The rows are the fresh query's (same messages, written by the same group-commit writer, read from
the same SQLite file); only their visibility is held back.
"""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import update

from bench.journal import fill_store, spark_ceiling
from bench.journal_lag import tree_cpu_s
from broker import config
from broker.store import Store
from broker.store.journal import JournalStore
from broker.store.schema import partitions

Offsets = dict[str, list[int]]

IDLE_S = 2.0         # idle triggers before each backlog (their CPU is measured then)
ROUNDS = 3          # backlogs drained one after another, each followed by its ceiling: drift hits both
DRAIN_TIMEOUT_S = 600


def _offsets(value: Any) -> Offsets:
    """A source offset of a progress record: Spark gives it as JSON text or as the parsed object."""
    parsed = json.loads(value) if isinstance(value, str) else value
    return {str(t): [int(n) for n in ends] for t, ends in (parsed or {}).items()}


def backlog_batches(progress: Sequence[Mapping[str, Any]], since: Offsets) -> list[Mapping[str, Any]]:
    """The progress records of the batches that carried the rows past ``since``, in batch order.

    A batch carried rows when its source's offsets moved (the journal's source plans only and
    reports ``numInputRows`` 0); it carried the backlog when it started at or past ``since`` in
    every partition. Idle triggers (no offsets moved) and the warm-up's batches are left out.
    """
    chosen = []
    for record in progress:
        source = record["sources"][0]
        start, end = _offsets(source["startOffset"]), _offsets(source["endOffset"])
        if start == end:
            continue
        if all(p < len(start.get(t, [])) and start[t][p] >= n for t, ends in since.items()
               for p, n in enumerate(ends)):
            chosen.append(record)
    return sorted(chosen, key=lambda r: int(r["batchId"]))


def drain_seconds(batches: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(seconds inside the batches, the sum of their ``triggerExecution``; wall seconds from the
    first one's start to the last one's end, counting what lies between them)."""
    if not batches:
        return 0.0, 0.0

    def started(record: Mapping[str, Any]) -> float:
        return datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00")).timestamp()

    busy = [r["durationMs"]["triggerExecution"] / 1000 for r in batches]
    return sum(busy), max(started(r) + b for r, b in zip(batches, busy, strict=True)) - started(batches[0])


def _set_ends(store: Store, ends: Offsets) -> None:
    """Set every partition's end offset to ``ends`` in one transaction."""
    with store.engine.begin() as conn:
        for topic, nexts in ends.items():
            for partition, nxt in enumerate(nexts):
                conn.execute(update(partitions).where(partitions.c.topic == topic,
                                                      partitions.c.partition == partition).values(next_offset=nxt))


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, p): n for t, ends in offsets.items() for p, n in enumerate(ends) if n}


def _reached(journaled: Mapping[tuple[str, int], int], offsets: Offsets) -> bool:
    """Whether the journal has recorded every row before ``offsets``."""
    return all(journaled.get(key, 0) >= n for key, n in _flat(offsets).items())


def moved_rows(record: Mapping[str, Any]) -> int:
    """The rows a batch's progress record covers: its source's end offsets minus its start offsets."""
    source = record["sources"][0]
    start, end = _offsets(source["startOffset"]), _offsets(source["endOffset"])
    return sum(n - (start.get(t, [])[p] if p < len(start.get(t, [])) else 0)
               for t, ends in end.items() for p, n in enumerate(ends))


def _wait(what: str, done: Any, query: Any) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while not done():
        if query.exception() is not None:
            raise RuntimeError(f"journal query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the running journal query did not {what} in {DRAIN_TIMEOUT_S} s")
        time.sleep(0.05)   # a store query per step: it counts in the measured CPU


def _round(spark: Any, query: Any, store: Store, journal: JournalStore, url: str, since: Offsets,
           until: Offsets, out: Path) -> dict[str, Any]:
    """Reveal the rows from ``since`` to ``until`` to the idle query, time its drain, then the ceiling's
    write of the same rows (while the query idles again: ``idle_cpu_cores`` says what that costs)."""
    rows = sum(_flat(until).values()) - sum(_flat(since).values())
    cpu = tree_cpu_s()
    time.sleep(IDLE_S)
    idle_cores = (tree_cpu_s() - cpu) / IDLE_S
    cpu = tree_cpu_s()
    revealed = time.monotonic()
    _set_ends(store, until)

    def drained() -> bool:
        # The last batch's progress is posted after its commit to the journaled offsets.
        return _reached(journal.journaled_offsets(), until) and any(
            _offsets(p["sources"][0]["endOffset"]) == until for p in query.recentProgress)

    _wait("drain the backlog", drained, query)
    reveal_to_drained = time.monotonic() - revealed
    cpu = tree_cpu_s() - cpu
    # recentProgress keeps the last 100 records; the backlog's batches are the latest.
    batches = backlog_batches(query.recentProgress, since)
    busy_s, wall_s = drain_seconds(batches)
    ceiling_s, created_s, ceiling_rows, ceiling_cpu = spark_ceiling(spark, url, out, start=since)
    shutil.rmtree(out, ignore_errors=True)
    assert ceiling_rows == rows, (ceiling_rows, rows)
    return {"rows": rows, "batches": len(batches), "batch_rows": [moved_rows(b) for b in batches],
            "journal_batches_s": busy_s, "journal_wall_s": wall_s, "reveal_to_drained_s": reveal_to_drained,
            "ceiling_s": ceiling_s, "ceiling_created_s": created_s,
            "ratio": ceiling_s / busy_s, "ratio_wall": ceiling_s / wall_s, "ratio_vs_created": created_s / busy_s,
            "journal_cpu_s": cpu, "ceiling_cpu_s": ceiling_cpu, "idle_cpu_cores": idle_cores}


def measure(spark: Any, root: Path, warm_per_topic: int, per_topic: int, max_rows: int,
            rounds: int = ROUNDS) -> dict[str, Any]:
    """A running journal query drains ``rounds`` backlogs of ``per_topic`` rows a topic, one after
    another, after ``warm_per_topic``; after each, Spark writes the same rows from a cached DataFrame
    (``bench.journal.spark_ceiling``). The ratio is the median of the rounds' (each round's listed)."""
    from journal_spark.job import journal_stream
    from journal_spark.source import read_end_offsets
    from journal_spark.table import DeltaSink

    data = root / f"running-{per_topic}"
    settings = config.load(env={}, overrides={"data_dir": str(data), "journal_max_rows": max_rows})
    url = settings.effective_database_url
    store = Store(url)
    store.create_schema()
    journal = JournalStore(url, pooled=False)
    fill_store(store, warm_per_topic)
    marks = [read_end_offsets(journal)]     # the warm-up's end offsets, then each round's
    for k in range(rounds):
        fill_store(store, per_topic, first=warm_per_topic + k * per_topic)
        marks.append(read_end_offsets(journal))
    _set_ends(store, marks[0])
    checkpoint = data / "checkpoints"
    sink = DeltaSink(settings.effective_journal_dir, checkpoint, journal)
    sink.start = "earliest"
    query = (journal_stream(spark, url, checkpoint.resolve() / DeltaSink.name, sink, max_rows=max_rows)
             .trigger(processingTime=f"{settings.journal_trigger_ms} milliseconds").start())
    try:
        _wait("drain its warm-up backlog", lambda: _reached(journal.journaled_offsets(), marks[0]), query)
        # The ceiling's first run in a JVM is slower (C2): warm it on the warm-up rows, as the
        # fresh-query measurement's warm-up run did, while the query idles.
        spark_ceiling(spark, url, data / "ceiling-warm-up")
        measured = [_round(spark, query, store, journal, url, since, until, data / f"ceiling-{k}")
                    for k, (since, until) in enumerate(itertools.pairwise(marks))]
    finally:
        query.stop()
        sink.close()
    store.dispose()
    journal.dispose()
    rows = sum(r["rows"] for r in measured)
    return {"rows": measured[0]["rows"], "rounds": measured, "warm_up_rows": sum(_flat(marks[0]).values()),
            "max_rows": max_rows, "trigger_ms": settings.journal_trigger_ms,
            "ratio": statistics.median(r["ratio"] for r in measured),
            "ratio_wall": statistics.median(r["ratio_wall"] for r in measured),
            "ratio_vs_created": statistics.median(r["ratio_vs_created"] for r in measured),
            "ratio_of_sums": sum(r["ceiling_s"] for r in measured) / sum(r["journal_batches_s"] for r in measured),
            "journal_rows_per_s": statistics.median(r["rows"] / r["journal_batches_s"] for r in measured),
            "ceiling_rows_per_s": statistics.median(r["rows"] / r["ceiling_s"] for r in measured),
            "journal_cpu_s_per_1000_rows": 1000 * sum(r["journal_cpu_s"] for r in measured) / rows,
            "ceiling_cpu_s_per_1000_rows": 1000 * sum(r["ceiling_cpu_s"] for r in measured) / rows,
            "idle_cpu_cores": max(r["idle_cpu_cores"] for r in measured)}
