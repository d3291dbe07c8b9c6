"""Kafka egress bridge throughput against a bare confluent-kafka producer, in the same run.

Both send the same records (same keys, bodies, timestamps and headers) to fresh topics with the
same partition count, from the same rows (each batch in store order, as the journal hands it
over) in the same process. The bare producer is the ceiling: the leanest ``produce`` loop, then
``flush``, with the bridge's producer settings (idempotent, acks=all, linger, batch and queue
sizes) but no transactions, so it is the stricter ceiling. The bridge is
:class:`KafkaSink.write_rows` over envelope rows in micro-batches of ``journal_max_rows``
(20,000): routing, key and header conversion, one transaction per batch with its markers. Spark's
own overhead (the store source) is not in this figure; it is the journal's, measured by the
journal benchmark.

Rounds: bare, bridge, bare, bridge, ... (``ROUNDS`` bridge runs); each bridge run is held against
the mean of the bare runs on either side, and the figure is the median of those ratios (each printed).

Target: ``ratio_bridge_vs_bare_producer`` >= 0.7. The same ratio on CPU time
(``ratio_cpu_bare_vs_bridge``: the process's CPU seconds per record, librdkafka's threads included)
is printed beside it: on a shared machine the wall-clock rates swing with other processes' load,
the CPU each record costs much less.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import own_peak_rss_mb, report, write_results

BOOTSTRAP = "127.0.0.1:9092"
PARTITIONS = 8
BATCH = 20_000
ROUNDS = 3          # bridge runs, each between two bare runs; the figure is their median


def _rows(count: int) -> list[dict[str, Any]]:
    """``count`` messages of one broker topic, published round-robin over its partitions, in the
    order the journal hands a bridge each micro-batch of ``BATCH`` rows: store order, one
    partition's rows after another's (``BatchReader(ordered=True)``)."""
    body = b"x" * 200
    now = int(time.time() * 1000)

    def row(i: int) -> dict[str, Any]:
        return {"id": f"m-{i}", "topic": "orders", "partition": i % PARTITIONS, "offset": i // PARTITIONS,
                "key": None, "headers": {"CorrelationId": f"c-{i % 1000}", "jms.JMSType": "order"},
                "timestamp": now, "content_type": "text/plain", "body": body}

    return [row(i) for lo in range(0, count, BATCH)
            for i in sorted(range(lo, min(lo + BATCH, count)), key=lambda i: (i % PARTITIONS, i // PARTITIONS))]


def _create(*topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                       for t in topics]).values():
        future.result(timeout=30)


def _delete(*topics: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in admin.delete_topics(list(topics)).values():
        try:
            future.result(timeout=30)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def bare_producer(topic: str, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(records per second, CPU seconds) of a plain confluent-kafka producer sending the same records.

    The leanest loop we know: ``produce`` bound to a local, positional arguments, the key and header
    values as str (the client encodes them in C), the headers one dict merge. Its producer settings
    are the bridge's, less the transaction: a ceiling without the per-batch commits exactly-once needs.
    """
    from confluent_kafka import Producer

    from journal_spark.bridges.kafka import PRODUCER_DEFAULTS, PRODUCER_FIXED

    producer = Producer({"bootstrap.servers": BOOTSTRAP, **PRODUCER_DEFAULTS, **PRODUCER_FIXED})
    produce, poll = producer.produce, producer.poll
    # Connected and holding its producer id before the clock starts, as the bridge's producer is
    # (its constructor runs init_transactions outside the timed part).
    produce(topic, b"warm-up")
    assert producer.flush(30) == 0
    start, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        headers = row["headers"]
        record_headers = {**headers, "jmsbridge.origin": "bare", "jmsbridge.hops": "1",
                          "toymb.content_type": row["content_type"]}
        while True:
            try:
                produce(topic, row["body"], headers["CorrelationId"], -1, None, None, row["timestamp"],
                        record_headers)
                break
            except BufferError:
                poll(0.05)
    assert producer.flush(120) == 0
    return len(rows) / (time.perf_counter() - start), time.process_time() - cpu


def bridge(topic: str, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(records per second, CPU seconds) through the bridge sink (transaction + markers per 20,000-row batch)."""
    from journal_spark.bridges.kafka import KafkaSink
    from journal_spark.routes_file import load_routes

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "routes.properties"
        path.write_text(f"kafka.bootstrap.servers={BOOTSTRAP}\nbridge.id=bench-{topic}\n"
                        f"routes.o.predicate=msg.address==orders\nroutes.o.dest.topic={topic}\n"
                        "routes.o.conv.key=msg.header.CorrelationId\n")
        sink = KafkaSink(load_routes(path))
    start, cpu = time.perf_counter(), time.process_time()
    for batch_id, lo in enumerate(range(0, len(rows), BATCH)):
        sink.write_rows(rows[lo:lo + BATCH], batch_id)
    rate, cpu = len(rows) / (time.perf_counter() - start), time.process_time() - cpu
    sink.close()
    return rate, cpu


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    count = 40_000 if quick else 200_000
    rows = _rows(count)
    suffix = uuid.uuid4().hex[:8]
    # Each bridge round writes its own topic as its own bridge: a bridge id's markers say its rows
    # were exported, so a second round under the same id would skip them all.
    bare_topic, bridge_topics = f"bench-bare-{suffix}", [f"bench-bridge-{suffix}-{k}" for k in range(ROUNDS)]
    _create(bare_topic, *bridge_topics)
    try:
        bares = [bare_producer(bare_topic, rows)]
        bridged = []
        for topic in bridge_topics:     # interleaved: bare, bridge, bare, ...: load drift hits both
            bridged.append(bridge(topic, rows))
            bares.append(bare_producer(bare_topic, rows))
    finally:
        _delete(bare_topic, *bridge_topics)
    # A round: the bridge's run against the mean of the bare runs on either side of it.
    around = [((a_rate + b_rate) / 2, (a_cpu + b_cpu) / 2)
              for (a_rate, a_cpu), (b_rate, b_cpu) in itertools.pairwise(bares)]
    ratios = [rate / bare_rate for (rate, _), (bare_rate, _) in zip(bridged, around, strict=True)]
    cpu_ratios = [bare_cpu / cpu for (_, cpu), (_, bare_cpu) in zip(bridged, around, strict=True)]
    ceiling_cpu = statistics.mean(cpu for _, cpu in bares)
    bridge_cpu = statistics.mean(cpu for _, cpu in bridged)
    results: dict[str, Any] = {
        "quick": quick, "records": count, "body_bytes": 200, "partitions": PARTITIONS, "batch_rows": BATCH,
        "rounds": ROUNDS,
        "bare_producer_msgs_per_s": statistics.median(rate for rate, _ in bares),
        "bridge_msgs_per_s": statistics.median(rate for rate, _ in bridged),
        "ratio_bridge_vs_bare_producer": statistics.median(ratios), "target_ratio": 0.7,
        "ratio_each_round": ratios,
        "cpu_us_per_record_bare": ceiling_cpu / count * 1e6, "cpu_us_per_record_bridge": bridge_cpu / count * 1e6,
        "ratio_cpu_bare_vs_bridge": statistics.median(cpu_ratios),
        "peak_rss_mb": own_peak_rss_mb(),
    }
    report("Kafka bridge egress", {**results, "ratio_each_round": ", ".join(f"{r:.3f}" for r in ratios)})
    bars = {"bridge / bare producer": results["ratio_bridge_vs_bare_producer"],
            "same, on CPU per record": results["ratio_cpu_bare_vs_bridge"], "target": 0.7}
    write_results(out_dir, "kafka_bridge", results, bars)
    return results


if __name__ == "__main__":
    run(quick=True)
