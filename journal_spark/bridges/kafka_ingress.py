"""Kafka ingress: a Kafka topic into a broker topic over HTTP, with nothing stored twice.

Each record becomes a message with the deterministic id ``kafka:<topic>:<partition>:<offset>``,
so publishing it again after a crash stores nothing (the broker answers with the original
coordinates). Offsets are committed to Kafka only after the broker acknowledged the batch, so a
crash re-consumes at most the unacknowledged tail, which the ids make harmless. The consumer
reads ``read_committed``: aborted bridge transactions never come in.

Conversion: the Kafka key (UTF-8) is the message key, so the broker picks the same partition
number as Kafka did for the same count; the headers come back as message headers
(``toymb.content_type`` restores the content type); the hop count goes up by one,
``jmsbridge.origin`` becomes this bridge and ``jmsbridge.path`` gains ``<bridge.id>@kafka``, so
this bridge's Kafka egress never sends the message back to Kafka (its JMS egress may still carry
it on). A record that has crossed ``routing.max-hops`` bridges is dropped. Undecodable keys or headers, or limits
exceeded, are data problems handled by ``routing.on-error`` (dead letters go to the Kafka
``routing.dead-letter.topic``).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from driver import Template
from driver.errors import HTTPStatusError, TransportError

from ..routes import (
    CONTENT_TYPE_HEADER,
    HOPS_HEADER,
    DataError,
    HardFailure,
    IngressRoute,
    Routes,
    hops_of,
    mark_arrival,
)
from .kafka import KAFKA_SYSTEM
from .telemetry import BridgeTelemetry

log = logging.getLogger(__name__)

MAX_BATCH = 1000            # the broker's default max_batch
MAX_HEADERS, MAX_HEADER_NAME, MAX_HEADER_VALUE, MAX_BODY = 64, 256, 8192, 1 << 20
RETRY_LIMIT_S = 300.0       # a broker unreachable this long is a hard stop


def message_id(msg: Message) -> str:
    return f"kafka:{msg.topic()}:{msg.partition()}:{msg.offset()}"


def _pairs(msg: Message) -> list[tuple[str, str | bytes | None]]:
    return [(str(k), v) for k, v in (msg.headers() or [])]  # type: ignore[str-unpack]


class KafkaIngress:
    """One ingress route, driven by :meth:`run` (in a thread or a process of its own)."""

    def __init__(self, routes: Routes, route: IngressRoute, telemetry: BridgeTelemetry | None = None,
                 token: str | None = None) -> None:
        if route.source.kind != "kafka":
            raise ValueError(f"ingress {route.name} does not read Kafka")
        self.routes, self.route = routes, route
        self.sink = f"kafka.ingress.{route.name}"
        self.telemetry = telemetry or BridgeTelemetry(routes.bridge_id)
        opts = route.options
        self.batch = max(1, min(MAX_BATCH, int(opts.get("batch.size", "500"))))
        self.batch_time = max(0.01, int(opts.get("batch.time.ms", "200")) / 1000)
        conf = routes.kafka_config()
        group = opts.get("group.id") or f"toymb-ingress-{routes.bridge_id}-{route.name}"
        # Static membership: a restarted ingress takes its partitions back at once, instead of
        # waiting out the session of the instance that crashed.
        self.consumer = Consumer({**conf, "group.id": group, "group.instance.id": f"{group}-1",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
        self.assigned = threading.Event()
        self.producer: Producer | None = None
        if routes.on_error == "dead-letter":
            self.producer = Producer({**conf, "enable.idempotence": True, "acks": "all",
                                      "on_delivery": self._on_dead_letter})
        self._dlq_errors: list[str] = []
        self._hops_logged = False
        # The driver's client, with no retries of its own: _publish decides what is retried.
        self.broker = Template(route.broker_url, token=token or opts.get("token") or os.environ.get("TOYMB_TOKEN"),
                               timeout=30.0, retries=0)

    def run(self, stop: threading.Event, *, idle_exit_s: float | None = None) -> None:
        """Move records until ``stop`` is set (or nothing came for ``idle_exit_s``)."""
        self.consumer.subscribe([self.route.source.name], on_assign=lambda _c, _p: self.assigned.set())
        idle_since = time.monotonic()
        try:
            while not stop.is_set():
                records = self.consumer.consume(self.batch, self.batch_time)
                records = [m for m in records if self._usable(m)]
                if not records:
                    if not self.assigned.is_set():
                        idle_since = time.monotonic()    # idle only counts once partitions are ours
                    elif idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                        return
                    continue
                idle_since = time.monotonic()
                self.move(records, stop)
        finally:
            self.consumer.close()
            if self.producer is not None:
                self.producer.flush(10)

    def move(self, records: list[Message], stop: threading.Event) -> None:
        """Publish one consumed batch, then commit its offsets (only after the broker's ack)."""
        t0 = time.perf_counter()
        messages, looped = [], 0
        for msg in records:
            try:
                converted = self.convert(msg)
            except DataError as exc:
                self._soft_failure(msg, exc)
                continue
            if converted is None:
                looped += 1
            else:
                messages.append(converted)
        if messages:
            self._publish(messages, stop)
        if self.producer is not None and (self.producer.flush(30) > 0 or self._dlq_errors):
            raise HardFailure(f"dead letters to {self.routes.dead_letter_topic} were not acknowledged: "
                              f"{'; '.join(self._dlq_errors[:3]) or 'timed out'}")
        ends: dict[tuple[str, int], int] = {}
        for msg in records:
            key = (str(msg.topic()), int(msg.partition() or 0))
            ends[key] = max(ends.get(key, 0), int(msg.offset() or 0) + 1)
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()],
                             asynchronous=False)
        self.telemetry.routed(self.sink, len(messages), time.perf_counter() - t0)
        if looped:
            self.telemetry.skipped(self.sink, looped, "max-hops")
            log.log(logging.DEBUG if self._hops_logged else logging.WARNING,
                    "ingress %s: %d record(s) crossed routing.max-hops=%d bridges and were dropped%s",
                    self.route.name, looped, self.routes.max_hops,
                    "" if self._hops_logged else "; further ones are counted in jms_bridge_routing_skipped_total")
            self._hops_logged = True

    def convert(self, msg: Message) -> dict[str, Any] | None:
        """The broker message for ``msg``; None when loop prevention drops it."""
        headers: dict[str, str] = {}
        for name, raw in _pairs(msg):
            try:
                text = "" if raw is None else raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            except UnicodeDecodeError:
                raise DataError("bad-header", f"header {name!r} of {message_id(msg)} is not UTF-8") from None
            headers[name] = text
        hops = hops_of(headers)
        if hops >= self.routes.max_hops:
            return None
        content_type = headers.pop(CONTENT_TYPE_HEADER, "") or "application/octet-stream"
        mark_arrival(headers, self.routes.bridge_id, KAFKA_SYSTEM)
        headers[HOPS_HEADER] = str(hops + 1)
        if len(headers) > MAX_HEADERS or any(len(k) > MAX_HEADER_NAME or len(v) > MAX_HEADER_VALUE
                                             for k, v in headers.items()):
            raise DataError("header-limits",
                            f"{message_id(msg)} has more or longer headers than the broker takes")
        key = msg.key()
        try:
            text_key = None if key is None else key.decode("utf-8") if isinstance(key, bytes) else str(key)
        except UnicodeDecodeError:
            raise DataError("bad-key", f"the key of {message_id(msg)} is not UTF-8") from None
        value = msg.value() or b""
        body = value if isinstance(value, bytes) else str(value).encode()
        if len(body) > MAX_BODY:
            raise DataError("too-large", f"{message_id(msg)} has a {len(body)}-byte body, over {MAX_BODY}")
        out: dict[str, Any] = {"id": message_id(msg), "headers": headers, "content_type": content_type,
                               "body_base64": base64.b64encode(body).decode()}
        if text_key:
            out["key"] = text_key
        return out

    # ------------------------------------------------------------------------- internals
    def _usable(self, msg: Message) -> bool:
        error = msg.error()
        if error is None:
            return True
        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise HardFailure(f"ingress {self.route.name}: cannot read Kafka topic {self.route.source.name}: "
                              f"{error.str()}")
        log.warning("ingress %s: %s", self.route.name, error)
        return False

    def _publish(self, messages: list[dict[str, Any]], stop: threading.Event) -> None:
        delay, deadline = 0.2, time.monotonic() + RETRY_LIMIT_S
        while True:
            try:
                self.broker.publish_encoded(self.route.dest_topic, messages)
                return
            except HTTPStatusError as exc:
                status = exc.status_code or 500
                if status < 500 and status not in (408, 429):
                    raise HardFailure(f"ingress {self.route.name}: the broker refused the batch for "
                                      f"{self.route.dest_topic}: {str(exc)[:300]}") from None
                problem = str(exc)[:200]
            except TransportError as exc:
                problem = str(exc)[:300]
            if stop.is_set() or time.monotonic() > deadline:
                # Not committed: the next run re-consumes these records, and their ids dedupe.
                raise HardFailure(f"ingress {self.route.name}: broker at {self.route.broker_url} "
                                  f"unavailable: {problem}")
            log.warning("ingress %s: publish failed (%s); retrying in %.1fs", self.route.name, problem, delay)
            stop.wait(delay)
            delay = min(5.0, delay * 2)

    def _on_dead_letter(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None and len(self._dlq_errors) < 100:
            self._dlq_errors.append(err.str())

    def _soft_failure(self, msg: Message, exc: DataError) -> None:
        self.telemetry.failed(self.sink, exc.reason)
        policy = self.routes.on_error
        where = f"ingress {self.route.name}: record {message_id(msg)}"
        if policy == "fail":
            raise DataError(exc.reason, f"{where}: {exc}; routing.on-error=fail stops the bridge") from None
        if policy == "skip":
            log.warning("skipped %s: %s", where, exc)
            return
        assert self.producer is not None
        headers: list[tuple[str, str | bytes | None]] = _pairs(msg) + [
            ("toymb.dlq.reason", exc.reason.encode()), ("toymb.dlq.error", str(exc)[:1000].encode()),
            ("toymb.dlq.route", self.route.name.encode()), ("toymb.dlq.source", message_id(msg).encode())]
        try:
            self.producer.produce(str(self.routes.dead_letter_topic), value=msg.value(), key=msg.key(),
                                  headers=headers)
        except (BufferError, Exception) as dlq_exc:  # noqa: BLE001 - any failure here is a hard stop
            raise HardFailure(f"dead-lettering {where} failed: {dlq_exc}") from None
        log.warning("dead-lettered %s: %s", where, exc)
