"""The journal's lag, measured per message: from the publish's acknowledgement to the journal's record.

A writer publishes at a steady rate through the broker's group-commit appender while the real
journal job (``journal_spark.job.run``, its configured trigger) runs. Each append returns the
messages' (partition, offset) once committed: that instant is the message's publish time. A
watcher polls the journal's recorded offsets (``toymb_journal_offsets``, written right after each
Delta commit) every ``POLL_S``; a message's visible time is the first poll that finds it journaled.
Its lag is the difference, so the figures are per message (every one published in the steady
window counts once) and at most one poll interval late, never early.

An earlier probe sampled the backlog (store end offsets minus journaled offsets) every 0.5 s and
divided it by the rate. With a 1 s trigger, samples every 0.5 s fall on two phases of the
batch cycle only, so its p95 depended on where those phases fell rather than on the journal.

Run alone: ``python -m bench.journal_lag [--rate 3000] [--seconds 40] [--trigger-ms 1000]``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from broker import config
from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store import Store
from broker.store.journal import JournalStore

POLL_S = 0.02   # the watcher's step: a message's lag is over-stated by at most this much
TICK_S = 0.05   # the publisher's step: rate * TICK_S messages per append


def _messages(start: int, count: int) -> list[NewMessage]:
    body = b'{"order":%d,"lines":[1,2,3],"note":"' + b"x" * 160 + b'"}'
    return [NewMessage(f"m-{i}", f"customer-{i % 997}", {"seq": str(i), "source": "bench"},
                       "application/json", body % i) for i in range(start, start + count)]


def tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by ``pid`` (default: this process) and its descendants:
    the living ones, and those that ended and were waited for by their parent (``cutime``/``cstime``).

    Spark's Python workers and its streaming-source runner (1.3-1.9 CPU-s a query) end and are
    reaped by the JVM before a run's last sample: counting only the living left them out.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    usage: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        usage[int(entry.name)] = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    total, todo = 0.0, [pid or os.getpid()]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        total += usage.get(current, 0.0)
    return total


class Watcher(threading.Thread):
    """Polls the journaled offsets; keeps, per (topic, partition), when each new offset was first seen."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True, name="lag-watcher")
        self.journal = JournalStore(url, pooled=False)
        self.seen: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
        self.stopped = threading.Event()

    def run(self) -> None:
        last: dict[tuple[str, int], int] = {}
        while not self.stopped.wait(POLL_S):
            now = time.monotonic()
            for key, nxt in self.journal.journaled_offsets().items():
                if nxt > last.get(key, 0):
                    self.seen[key].append((nxt, now))
                    last[key] = nxt
        self.journal.dispose()

    def visible_at(self, key: tuple[str, int], offset: int) -> float | None:
        """When ``offset`` of ``key`` was first seen journaled, or None if never."""
        steps = self.seen.get(key, [])
        i = bisect.bisect_right([n for n, _ in steps], offset)   # first step whose next offset > offset
        return steps[i][1] if i < len(steps) else None


def _batch_phases(last: int) -> dict[str, float]:
    """Median milliseconds of each phase Spark reports (``durationMs``) over the journal query's last batches."""
    import statistics

    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if spark is None:
        return {}
    phases: dict[str, list[float]] = defaultdict(list)
    for query in spark.streams.active:
        if query.name != "toymb-table":
            continue
        for progress in query.recentProgress[-last:]:
            for name, ms in progress["durationMs"].items():
                phases[name].append(ms)
    return {name: statistics.median(values) for name, values in sorted(phases.items())}


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def measure(root: Path, rate: int, seconds: float, trigger_ms: int | None = None,
            warmup: float = 0.0) -> dict[str, Any]:
    """Publish at ``rate`` msg/s for ``warmup`` + ``seconds`` while the journal job runs; the lag of
    every message published in the last ``seconds`` (a fresh JVM's first batches run cold code)."""
    from journal_spark import job

    data = root / "lag"
    overrides: dict[str, Any] = {"data_dir": str(data), "journal_metrics_port": 0}
    if trigger_ms is not None:
        overrides["journal_trigger_ms"] = trigger_ms
    settings = config.load(env={}, overrides=overrides)
    store = Store(settings.effective_database_url)
    store.create_schema()
    topic, _ = store.ensure_topic("orders", 16)
    stop = threading.Event()
    runner = threading.Thread(target=job.run, args=(settings,), kwargs={"stop": stop}, daemon=True)
    runner.start()
    appender = Appender(store)
    appender.start()
    # The steady state: wait for the job's first (empty) batch, which is its start-up.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (data / "checkpoints" / "table" / "commits" / "0").is_file():
        time.sleep(0.2)
    time.sleep(1)
    watcher = Watcher(settings.effective_database_url)
    watcher.start()
    acked: list[tuple[float, str, int, int]] = []   # (ack time, topic, partition, offset)
    published = 0
    start = time.monotonic()
    steady = start + warmup
    cpu0: float | None = None
    while (now := time.monotonic()) < steady + seconds:
        if cpu0 is None and now >= steady:
            cpu0 = tree_cpu_s()
        due = int((now - start) * rate) - published
        if due > 0:
            stored = appender.append(topic, _messages(published, due))
            if now >= steady:
                at = time.monotonic()
                acked.extend((at, s.topic, s.partition, s.offset) for s in stored)
            published += due
        time.sleep(TICK_S)
    cpu_s, wall_s = tree_cpu_s() - (cpu0 or 0.0), time.monotonic() - steady
    drain_start = time.monotonic()
    while time.monotonic() - drain_start < 120 and not all(
            watcher.visible_at((t, p), o) is not None for _, t, p, o in acked[-200:]):
        time.sleep(0.1)
    drained_s = time.monotonic() - drain_start
    phases = _batch_phases(int(seconds) + 5)
    watcher.stopped.set()
    watcher.join()
    appender.stop()
    stop.set()
    runner.join(timeout=60)
    store.dispose()
    lags = []
    missing = 0
    for at, t, p, o in acked:
        seen = watcher.visible_at((t, p), o)
        if seen is None:
            missing += 1
        else:
            lags.append(seen - at)
    lags.sort()
    steps = sorted({s for key in watcher.seen for _, s in watcher.seen[key] if s >= steady})
    gaps = sorted(b - a for a, b in zip(steps, steps[1:], strict=False))
    return {"rate_msgs_per_s": rate, "seconds": seconds, "published": published, "never_journaled": missing,
            "trigger_ms": settings.journal_trigger_ms, "poll_s": POLL_S,
            "lag_mean_s": sum(lags) / max(1, len(lags)), "lag_p50_s": _percentile(lags, 0.5),
            "lag_p95_s": _percentile(lags, 0.95), "lag_p99_s": _percentile(lags, 0.99),
            "lag_max_s": lags[-1] if lags else float("nan"),
            "commits_seen": len(steps), "commit_gap_p50_s": _percentile(gaps, 0.5),
            "commit_gap_p95_s": _percentile(gaps, 0.95),
            "cpu_s_per_s": cpu_s / wall_s, "batch_phases_ms_median": phases, "drain_after_stop_s": drained_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--trigger-ms", type=int, default=None)
    parser.add_argument("--warmup", type=float, default=20, help="seconds published before measuring")
    args = parser.parse_args()
    if os.environ.get("TOYMB_BENCH_VERBOSE"):
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root = Path(tempfile.mkdtemp(prefix="toymb-bench-lag-"))
    try:
        print(json.dumps(measure(root, args.rate, args.seconds, args.trigger_ms, args.warmup), indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
