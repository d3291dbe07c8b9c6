"""Peer systems measured in the same run: Kafka, ActiveMQ over STOMP, NATS JetStream.

Each function publishes ``count`` durable messages of ``size`` bytes and returns messages per
second, or None when the peer is not running (start them with ``services/all.sh start``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from typing import Any

KAFKA = os.environ.get("TOYMB_TEST_KAFKA", "127.0.0.1:9092")
STOMP = os.environ.get("TOYMB_TEST_STOMP", "127.0.0.1:61613")
NATS = os.environ.get("TOYMB_TEST_NATS", "nats://127.0.0.1:4222")


def _up(address: str) -> bool:
    host, _, port = address.rpartition("/")[-1].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def kafka_produce(count: int, size: int, partitions: int = 100) -> float | None:
    """confluent-kafka producer, acks=all, idempotent: the bare-producer ceiling for Kafka."""
    if not _up(KAFKA):
        return None
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": KAFKA})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": KAFKA, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "compression.type": "none"})
    payload = b"x" * size
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    admin.delete_topics([topic])
    return count / elapsed


def stomp_send_concurrent(count: int, size: int, connections: int, *, receipt_each: bool) -> float | None:
    """Persistent sends over ``connections`` STOMP connections at once (one thread each).

    With ``receipt_each`` every send waits for its receipt (ActiveMQ's ack after the store wrote
    it: the peer of a publish acked after commit); otherwise only each connection's last does.
    """
    if not _up(STOMP):
        return None
    import threading

    import stomp

    host, port = STOMP.rsplit(":", 1)
    queue = f"/queue/bench-{uuid.uuid4().hex[:8]}"
    body = "x" * size
    per = count // connections

    class Receipts(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.seen = threading.Condition()
            self.last = ""

        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            with self.seen:
                self.last = frame.headers.get("receipt-id", "")
                self.seen.notify_all()

        def wait(self, receipt: str) -> None:
            with self.seen:
                if not self.seen.wait_for(lambda: self.last == receipt, timeout=60):
                    raise TimeoutError(f"no STOMP receipt {receipt}")

    conns = []
    for _ in range(connections):
        conn = stomp.Connection([(host, int(port))])
        listener = Receipts()
        conn.set_listener("receipts", listener)
        conn.connect(wait=True)
        conns.append((conn, listener))

    def send(conn: Any, listener: Receipts, n: int) -> None:
        for i in range(per):
            headers = {"persistent": "true"}
            if receipt_each or i == per - 1:
                headers["receipt"] = f"r{n}-{i}"
                conn.send(queue, body, headers=headers)
                listener.wait(headers["receipt"])
            else:
                conn.send(queue, body, headers=headers)

    threads = [threading.Thread(target=send, args=(c, lst, n)) for n, (c, lst) in enumerate(conns)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for conn, _ in conns:
        conn.disconnect()
    drain_stomp_queue(queue)
    return per * connections / elapsed


def drain_stomp_queue(queue: str) -> None:
    """Consume what a bench left in ``queue``: persistent messages nobody reads fill ActiveMQ's
    heap run after run (it ran out of memory, and later benches saw no receipts)."""
    from journal_spark.jms.stompclient import StompClient

    client = StompClient(STOMP).connect()
    try:
        client.subscribe(queue, "drain", ack="auto", headers={"activemq.prefetchSize": "1000"})
        while client.receive(1.0) is not None:
            pass
    finally:
        client.close()


def nats_publish_concurrent(count: int, size: int, publishers: int, in_flight: int = 1) -> float | None:
    """JetStream publishes from ``publishers`` concurrent publishers, each with ``in_flight`` unacked.

    ``in_flight=1`` is synchronous publishing (each publish awaits its ack before the next);
    more is asynchronous publishing with that window per publisher.
    """
    if not _up(NATS):
        return None
    import nats

    async def go() -> float:
        nc = await nats.connect(NATS)
        js = nc.jetstream()
        stream = f"bench{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        payload = b"x" * size
        per = count // publishers

        async def publisher() -> None:
            for start in range(0, per, in_flight):
                await asyncio.gather(*(js.publish(f"{stream}.m", payload) for _ in range(min(in_flight, per - start))))

        started = time.perf_counter()
        await asyncio.gather(*(publisher() for _ in range(publishers)))
        elapsed = time.perf_counter() - started
        await js.delete_stream(stream)
        await nc.close()
        return per * publishers / elapsed

    return asyncio.run(go())
