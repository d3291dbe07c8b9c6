"""Batch markers: what a transactional bridge has committed to Kafka, kept in Kafka itself.

A marker is a record in a compacted, one-partition topic (``_toymb_bridge_markers`` by default),
keyed ``<transactional.id>/<broker topic>``, whose value says, per partition of that broker
topic, the next store offset not yet exported: ``{"batch": 7, "next": [120, 0, 33, ...]}``.
The bridge writes the markers of a micro-batch *in the same Kafka transaction* as its records,
so a marker is visible to a ``read_committed`` consumer exactly when the records are. After a
crash, the restarted bridge first fences the old producer (``init_transactions`` aborts its open
transaction), then reads the markers back and drops every row below them: a replayed batch, or
a batch re-read from a lost checkpoint, exports nothing twice.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ..routes import HardFailure

log = logging.getLogger(__name__)

Done = dict[str, dict[int, int]]    # broker topic -> partition -> next offset not yet exported
MARKER_READ_TIMEOUT_S = 60.0
MAX_MARKER_RECORDS = 1_000_000       # bound on a marker scan (a compacted topic stays far smaller)


def ensure_marker_topic(admin: AdminClient, topic: str) -> None:
    """Create the compacted marker topic if it is missing (our own topic, so creating it is fine)."""
    if topic in admin.list_topics(timeout=10).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                            config={"cleanup.policy": "compact"})])
    for future in futures.values():
        try:
            future.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - inspected below
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise HardFailure(f"cannot create the bridge marker topic {topic}: {exc}") from None


def marker_key(transactional_id: str, topic: str) -> bytes:
    return f"{transactional_id}/{topic}".encode()


def encode_marker(batch_id: int, offsets: dict[int, int]) -> bytes:
    width = max(offsets) + 1 if offsets else 0
    return json.dumps({"batch": batch_id, "next": [offsets.get(p, 0) for p in range(width)]},
                      separators=(",", ":")).encode()


def read_markers(conf: dict[str, Any], topic: str, transactional_id: str) -> Done:
    """The committed markers of ``transactional_id``: a ``read_committed`` scan of the marker topic."""
    prefix = f"{transactional_id}/"
    consumer = Consumer({**_consumer_conf(conf), "group.id": f"{transactional_id}.markers",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    done: Done = {}
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + MARKER_READ_TIMEOUT_S
        seen = 0
        while True:
            if time.monotonic() > deadline or seen > MAX_MARKER_RECORDS:
                raise HardFailure(f"could not read the bridge markers in {topic} within "
                                  f"{MARKER_READ_TIMEOUT_S:.0f}s; is Kafka reachable?")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise HardFailure(f"reading the bridge markers in {topic}: {error}")
            seen += 1
            key = (msg.key() or b"").decode("utf-8", "replace")
            if not key.startswith(prefix):
                continue
            broker_topic = key[len(prefix):]
            value = msg.value()
            if value is None:
                done.pop(broker_topic, None)
                continue
            offsets = json.loads(value)["next"]
            done[broker_topic] = {p: int(n) for p, n in enumerate(offsets) if n}
    finally:
        consumer.close()
    log.info("bridge %s resumes after markers of %d topic(s)", transactional_id, len(done))
    return done


def _consumer_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a producer configuration (drops producer-only keys)."""
    producer_only = ("transactional.id", "enable.idempotence", "acks", "linger.ms", "partitioner",
                     "on_delivery", "delivery.report.only.error", "compression.type", "batch.size",
                     "queue.buffering.max.messages", "queue.buffering.max.kbytes", "transaction.timeout.ms",
                     "message.timeout.ms", "batch.num.messages")
    return {k: v for k, v in conf.items() if k not in producer_only}
