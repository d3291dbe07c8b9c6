"""Kafka ingress against real Kafka and a real broker node: ids, headers, partitions, crashes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Producer

from broker.partitioning import partition_for
from broker.store import Store
from tests.bridges_kafka.conftest import BOOTSTRAP, consume_all, create_topics, routes_file
from tests.support import NodeProcess, stored_messages, wait_until

pytestmark = [pytest.mark.usefixtures("kafka"), pytest.mark.timeout(300)]


def test_broker_partition_equals_kafkas_default_partitioner(names: Any) -> None:
    """1,000 keys produced by a real Kafka producer land where the broker would put them."""
    topic = names("parts")
    create_topics(topic, partitions=13)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "partitioner": "murmur2_random"})
    keys = [f"customer-{i}-{random.Random(i).randbytes(4).hex()}é" for i in range(1000)]
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"x")
    assert producer.flush(30) == 0
    seen = {r.key().decode(): r.partition() for r in consume_all(topic, expect=1000)}
    assert len(seen) == 1000
    assert len(set(seen.values())) == 13
    mismatched = [k for k, p in seen.items() if partition_for(k, 13) != p]
    assert not mismatched, f"{len(mismatched)} keys differ, e.g. {mismatched[:3]}"


def _produce(topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "partitioner": "murmur2_random",
                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, start + count):
        headers = [("jms.JMSType", b"reply"), ("n", str(i).encode())]
        if i % 2:
            headers.append(("toymb.content_type", b"text/plain"))
        producer.produce(topic, key=f"k-{i % 211}".encode(), value=f"record {i}".encode(), headers=headers)
    assert producer.flush(30) == 0


def _stored(db: Path, topic: str) -> list[Any]:
    store = Store(f"sqlite:///{db}")
    try:
        return stored_messages(store, topic)
    finally:
        store.dispose()


@pytest.mark.slow
def test_sigkilled_ingress_stores_each_record_once(tmp_path: Path, names: Any) -> None:
    source, total = names("ingress-src"), 6000
    create_topics(source, partitions=4)
    db = tmp_path / "broker.db"
    with NodeProcess(tmp_path / "node", database_url=f"sqlite:///{db}") as node:
        dest = f"in-{source}"
        made = requests.put(f"{node.url}/v1/topics/{dest}", json={"partitions": 4}, timeout=10)
        assert made.status_code < 300, made.text
        routes = routes_file(tmp_path, f"bridge.id={source}\ningress.back.kafka.topic={source}\n"
                                       f"ingress.back.dest.topic={dest}\ningress.back.broker.url={node.url}\n"
                                       "ingress.back.batch.size=200\n")
        log_path = tmp_path / "ingress.log"
        args = [sys.executable, "-m", "journal_spark.ingress_cli", "--routes", str(routes)]

        def stored() -> int:
            info = requests.get(f"{node.url}/v1/topics/{dest}", timeout=10).json()
            ends = info["end_offsets"]
            return sum(int(v) for v in (ends.values() if isinstance(ends, dict) else ends))

        rng = random.Random(5)
        produced = 0
        with open(log_path, "ab") as log:
            for _kill in range(3):
                _produce(source, produced, total // 4)
                produced += total // 4
                before = stored()
                proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    wait_until(lambda b=before: stored() > b, timeout=60, what="ingress progress")
                    time.sleep(rng.uniform(0, 0.5))
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            _produce(source, produced, total - produced)
            final = subprocess.run(args + ["--idle-exit", "4"], stdout=log, stderr=subprocess.STDOUT,
                                   timeout=180)
        assert final.returncode == 0, log_path.read_text()[-3000:]
    rows = _stored(db, dest)
    counts = Counter(r.id for r in rows)
    assert not [i for i, n in counts.items() if n > 1]
    kafka_records = consume_all(source, expect=total)
    expected = {f"kafka:{source}:{r.partition()}:{r.offset()}": r for r in kafka_records}
    assert set(counts) == set(expected)
    for row in rows:
        record = expected[row.id]
        assert row.partition == record.partition()        # same key, same count: same partition
        assert row.key == record.key().decode() and bytes(row.body) == record.value()
        headers = json.loads(row.headers) if isinstance(row.headers, str) else row.headers
        n = int(headers["n"])
        assert headers["jms.JMSType"] == "reply" and headers["jmsbridge.origin"] == source
        assert headers["jmsbridge.hops"] == "1" and "toymb.content_type" not in headers
        assert row.content_type == ("text/plain" if n % 2 else "application/octet-stream")


def test_ingress_dead_letters_undecodable_records_and_keeps_going(tmp_path: Path, names: Any,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from journal_spark.bridges.kafka_ingress import KafkaIngress
    from journal_spark.routes_file import load_routes

    source, dlq = names("ingress-bad"), names("ingress-dlq")
    create_topics(source, dlq)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(source, key=b"good-1", value=b"one", headers=[("jmsbridge.hops", b"1")])
    producer.produce(source, key=b"\xff\xfe", value=b"bad key")                       # not UTF-8
    producer.produce(source, key=b"good-2", value=b"two", headers=[("h", b"\xc3\x28")])  # bad header
    producer.produce(source, key=b"looped", value=b"three", headers=[("jmsbridge.hops", b"4")])
    producer.produce(source, key=b"good-3", value=None)                                 # a tombstone
    assert producer.flush(30) == 0
    db = tmp_path / "broker.db"
    with NodeProcess(tmp_path / "node", database_url=f"sqlite:///{db}") as node:
        routes = load_routes(routes_file(tmp_path, f"bridge.id={source}\nrouting.on-error=dead-letter\n"
                                                   f"routing.dead-letter.topic={dlq}\n"
                                                   f"ingress.in.kafka.topic={source}\ningress.in.dest.topic=landed\n"
                                                   f"ingress.in.broker.url={node.url}\n"))
        KafkaIngress(routes, routes.ingress[0]).run(threading.Event(), idle_exit_s=2)
    stored = {r.key: r for r in _stored(db, "landed")}
    assert set(stored) == {"good-1", "good-3"}          # the looped record (4 hops) stays out
    assert "crossed routing.max-hops=4 bridges and were dropped" in caplog.text
    assert json.loads(stored["good-1"].headers)["jmsbridge.hops"] == "2"
    assert bytes(stored["good-3"].body) == b""
    letters = {r.value(): {k: v.decode(errors="replace") for k, v in r.headers() or []}
               for r in consume_all(dlq, expect=2)}
    assert set(letters) == {b"bad key", b"two"}
    assert letters[b"bad key"]["toymb.dlq.reason"] == "bad-key"
    assert letters[b"two"]["toymb.dlq.reason"] == "bad-header"
    assert letters[b"two"]["toymb.dlq.source"] == f"kafka:{source}:0:2"
