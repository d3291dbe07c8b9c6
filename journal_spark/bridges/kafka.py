"""The Kafka egress bridge: a journal sink that routes messages to Kafka topics, exactly once.

Per micro-batch, in one Kafka transaction of a producer with a stable ``transactional.id``
(``toymb-<bridge.id>-kafka``): the routed records, any dead letters, and a marker per broker
topic saying how far the export got (see :mod:`.markers`). A restarted job fences its killed
predecessor, reads the committed markers, and drops rows below them, so a ``read_committed``
consumer sees every routed message exactly once whatever the crash point.

Records: the message's headers (``jms.*`` untouched) plus ``jmsbridge.origin=<bridge.id>``,
``jmsbridge.hops`` and ``toymb.content_type``; the key from ``conv.key`` or else the message id;
the body as is; the message timestamp; the partition from Kafka's default partitioner
(``murmur2_random``, the same partition the broker itself chose for the same key and count).

Failures: a missing destination, an authorisation error or a failed dead-letter publish is a
:class:`HardFailure` (the job stops). A data problem is a :class:`DataError` handled by
``routing.on-error``: ``fail`` stops, ``skip`` logs, ``dead-letter`` writes the message to
``routing.dead-letter.topic`` with ``toymb.dlq.*`` headers, inside the same transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..predicates import header_map
from ..route_plan import TopicPlan, plan_for_topic
from ..routes import (
    CONTENT_TYPE_HEADER,
    HOPS_HEADER,
    ORIGIN_HEADER,
    PATH_HEADER,
    DataError,
    HardFailure,
    Route,
    Routes,
    headers_for,
)
from .markers import Done, encode_marker, ensure_marker_topic, marker_key, read_markers
from .sink import RouteSink, describe_row, driver_rows
from .telemetry import BridgeTelemetry

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]
RecordHeaders = dict[str, str | bytes | None]
SINK_NAME = "kafka.bridge"
KAFKA_SYSTEM = "kafka"        # the system name in jmsbridge.path (loop prevention)
TRANSACTION_TIMEOUT_S = 120.0   # a micro-batch must commit within this (kafka.transaction.timeout.ms)
# The producer's settings: the defaults a routes file's kafka.* keys may change, and the fixed ones
# (exactly once; the partition the broker itself chose for the same key). The benchmark's bare
# producer uses both too.
PRODUCER_DEFAULTS = {"linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 200000}
PRODUCER_FIXED = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}
POLL_EVERY = 1000                     # serve delivery callbacks every this many records
_HARD_CODES = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
               KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
               KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError._FENCED,
               KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def check_topics(admin: AdminClient, topics: Iterable[str], where: str) -> None:
    """:class:`HardFailure` naming every topic that is missing or not visible to this principal."""
    wanted = sorted(set(topics))
    try:
        metadata = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise HardFailure(f"cannot reach Kafka to check the bridge's topics: {exc}") from None
    missing = [t for t in wanted if t not in metadata.topics]
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    refused = [t for t in wanted if t in metadata.topics
               and getattr(metadata.topics[t].error, "code", lambda: None)() == denied]
    if missing:
        raise HardFailure(f"Kafka topic(s) {', '.join(missing)} do not exist (routes file {where}); "
                          "the bridge does not create destination topics: create them, or fix the route")
    if refused:
        raise HardFailure(f"not authorised to write Kafka topic(s) {', '.join(refused)} "
                          f"(routes file {where})")


class KafkaSink(RouteSink):
    """The journal sink of every route whose destination is a Kafka topic."""

    name = SINK_NAME

    def __init__(self, routes: Routes, telemetry: BridgeTelemetry | None = None) -> None:
        super().__init__(routes, telemetry)
        self.transactional_id = f"toymb-{routes.bridge_id}-kafka"
        self.conf: dict[str, Any] = routes.kafka_config()
        self.admin = AdminClient(_admin_conf(self.conf))
        self.destinations = {r.destination.name for r in routes.of_kind("kafka")}
        if routes.on_error == "dead-letter" and routes.dead_letter_topic:
            self.destinations.add(routes.dead_letter_topic)
        check_topics(self.admin, self.destinations, routes.path)
        ensure_marker_topic(self.admin, routes.marker_topic)
        self._errors: list[tuple[KafkaError, str | None]] = []    # delivery errors and their topics
        self._txn_topics: set[str] = set()      # topics written in the open transaction
        self._proven: set[str] = set()          # topics a committed transaction wrote: writable
        producer_conf = {
            **PRODUCER_DEFAULTS, "transaction.timeout.ms": int(TRANSACTION_TIMEOUT_S * 1000),
            **self.conf,
            "transactional.id": self.transactional_id, **PRODUCER_FIXED,
            "delivery.report.only.error": True, "on_delivery": self._on_delivery,
        }
        self.producer = Producer(producer_conf)
        try:
            # Fences a killed or paused predecessor: its open transaction is aborted here.
            self.producer.init_transactions(TRANSACTION_TIMEOUT_S)
        except KafkaException as exc:
            raise self._hard(exc.args[0], "initialising Kafka transactions") from None
        self.done: Done = read_markers(self.conf, routes.marker_topic, self.transactional_id)

    # ------------------------------------------------------------------ Spark entry point
    def write_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch: route the micro-batch's rows in one transaction (replays are dropped)."""
        self.write_rows(driver_rows(df), batch_id)

    def write_rows(self, rows: Iterable[Any], batch_id: int) -> int:
        """Route ``rows`` (envelope columns, store order) as batch ``batch_id``; returns records sent."""
        touched: Done = {}
        sent = failures = 0
        began = False
        started = time.perf_counter()    # routing and conversion time, per record on average (telemetry)
        done, bridge_id = self.done, self.routes.bridge_id
        produce, poll = self.producer.produce, self.producer.poll
        plans: dict[str, TopicPlan] = {}
        # Rows come in runs of one partition (store order): its bookkeeping is looked up once a run,
        # and so is its route when the predicates decide it from the topic alone.
        run_topic, run_partition = "", -1
        floor = high = run_high = 0      # the run's first offset to export; the next offset after the run
        plan = TopicPlan((), None)
        per_row = False                  # the run's rows are routed one by one (plan.route)
        route: Route | None = None       # else this is the run's route (None: nothing goes to Kafka)
        destination, full_checks = "", False
        next_poll = POLL_EVERY
        produced_to = ""                 # the destination of the last record queued
        record_headers: RecordHeaders    # str values: the client encodes them (UTF-8) in C
        try:
            # The hot loop: one pass per journaled row, so no allocation or lookup more than needed.
            for row in rows:
                topic, partition, offset = row["topic"], int(row["partition"]), int(row["offset"])
                if partition != run_partition or topic != run_topic:
                    if high > run_high:
                        touched.setdefault(run_topic, {})[run_partition] = high
                    run_topic, run_partition = topic, partition
                    floor = done.get(topic, {}).get(partition, 0)
                    run_high = high = touched.get(topic, {}).get(partition, 0)
                    plan = plans.get(topic) or plans.setdefault(topic, plan_for_topic(self.routes, topic))
                    per_row, route = bool(plan.tests), _kafka_route(plan.fallback)
                    if route is not None:
                        destination, full_checks = route.destination.name, _drops_non_persistent(route)
                if offset < floor:
                    continue                      # exported by a committed transaction already
                if offset >= high:
                    high = offset + 1
                if per_row:
                    route = _kafka_route(plan.route(row))
                    if route is None:
                        continue
                    destination, full_checks = route.destination.name, _drops_non_persistent(route)
                elif route is None:
                    continue
                if not began:
                    self.producer.begin_transaction()
                    began = True
                try:
                    headers = row["headers"]
                    if type(headers) is not dict:
                        headers = header_map(row)
                    if HOPS_HEADER in headers or PATH_HEADER in headers or ORIGIN_HEADER in headers or full_checks:
                        # Bridged before, or a route that drops some: the full checks.
                        if self.skip_reason(row, route, KAFKA_SYSTEM) is not None:
                            continue
                        key, record_headers = route.key_for(row), cast(RecordHeaders, headers_for(row, bridge_id))
                    else:
                        # A message no bridge has carried: no loop, hop one (headers_for's result).
                        key = route.key_from(headers, row)
                        try:
                            content_type = row["content_type"]
                        except (KeyError, ValueError, IndexError):     # a row without the column
                            content_type = None
                        if content_type:
                            record_headers = {**headers, ORIGIN_HEADER: bridge_id, HOPS_HEADER: "1",
                                              CONTENT_TYPE_HEADER: content_type}
                        else:
                            record_headers = {**headers, ORIGIN_HEADER: bridge_id, HOPS_HEADER: "1"}
                    body = row["body"]
                    if body is not None and type(body) is not bytes:
                        body = bytes(body)      # a bytearray or memoryview; bytes go as they are, uncopied
                    timestamp = int(row["timestamp"])
                    try:
                        # Positional (topic, value, key, partition, callback, on_delivery, timestamp,
                        # headers): str key and header values are encoded to UTF-8 by the client, in C.
                        produce(destination, body, key, -1, None, None, timestamp, record_headers)
                    except (BufferError, KafkaException):
                        # Nothing was queued: _send waits for room, or says what is wrong.
                        self._send(destination, key, body, record_headers, timestamp)
                    if destination != produced_to:
                        self._txn_topics.add(destination)
                        produced_to = destination
                    sent += 1
                except DataError as exc:
                    failures += 1
                    self._soft_failure(row, route, exc)
                if sent + failures >= next_poll:
                    poll(0)                       # serve delivery callbacks (errors only) now and then
                    next_poll += POLL_EVERY
            if high > run_high:
                touched.setdefault(run_topic, {})[run_partition] = high
            seconds = time.perf_counter() - started
            if not began:
                return 0        # nothing for Kafka in this batch: no transaction, no marker needed
            for topic, offsets in touched.items():
                merged = {**self.done.get(topic, {}), **offsets}
                self._send(self.routes.marker_topic, marker_key(self.transactional_id, topic),
                           encode_marker(batch_id, merged), None)
            self._commit()
            began = False
        except BaseException:
            if began:
                self._abort()
            raise
        for topic, offsets in touched.items():
            self.done.setdefault(topic, {}).update(offsets)
        self.telemetry.routed(self.name, sent, seconds)
        log.debug("batch %d: %d record(s) to Kafka, %d failure(s)", batch_id, sent, failures)
        return sent

    def close(self) -> None:
        """Deliver what is queued (at most 10 s), then release the producer: an open producer keeps
        reconnecting to its brokers (and logging each failure) for as long as it lives. A producer
        in a fatal state (after a hard failure) cannot abort its transaction; it is released all the same.
        The admin client (it has no ``close``) is released with the last reference to it."""
        try:
            self.producer.flush(10)
            self.producer.close()
        except KafkaException as exc:
            log.info("closing the Kafka producer: %s", exc)
        del self.admin

    # ------------------------------------------------------------------------- internals
    def _send(self, topic: str, key: str | bytes, value: bytes | None, headers: Headers | RecordHeaders | None,
              timestamp: int = 0) -> None:
        for _attempt in range(600):
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp)
                self._txn_topics.add(topic)
                return
            except BufferError:
                self.producer.poll(0.1)         # local queue full: let deliveries drain
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                    raise DataError("too-large", f"record for {topic} is larger than Kafka accepts "
                                                 f"({len(value or b'')} bytes)") from None
                raise self._hard(error, f"producing to {topic}") from None
        raise HardFailure(f"the Kafka producer queue stayed full for a minute while producing to {topic}")

    def _soft_failure(self, row: Any, route: Route, exc: DataError) -> None:
        headers = self.dead_letter_headers(row, route, exc, str(self.routes.dead_letter_topic))
        if headers is None:
            return
        where = describe_row(row, route)
        body = row["body"]
        value = bytes(body) if body is not None else None
        if value is not None and len(value) > 900_000:
            value = value[:900_000]        # the reason is in the headers; keep the letter deliverable
            headers["toymb.dlq.truncated"] = "true"
        try:
            self._send(str(self.routes.dead_letter_topic), str(row["id"]).encode(), value,
                       [(k, v.encode("utf-8", "replace")) for k, v in headers.items()], int(row["timestamp"]))
        except (DataError, HardFailure) as dlq_exc:
            raise HardFailure(f"dead-lettering {where} to {self.routes.dead_letter_topic} failed: "
                              f"{dlq_exc}") from None

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(self._errors) < 100:
            self._errors.append((err, msg.topic() if msg is not None else None))

    def _commit(self) -> None:
        try:
            self.producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        except KafkaException as exc:
            # Records the failed commit purged say only "purged"; the cause is a real delivery error
            # or the commit's own (an AddPartitionsToTxn refused, say), and the topic is theirs.
            # Which topic was refused is not said; a topic an earlier transaction wrote is not it.
            purged = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
            real = [(e, t) for e, t in self._errors if e.code() not in purged]
            suspects = sorted(self._txn_topics - self._proven) or sorted(self._txn_topics)
            first, topic = real[0] if real else (exc.args[0], ", ".join(suspects) or None)
            self._errors.clear()
            self._txn_topics.clear()
            raise self._hard(first, "committing the Kafka transaction", topic) from None
        self._proven |= self._txn_topics
        self._txn_topics.clear()
        if self._errors:           # cannot happen after a successful commit; be loud if it does
            first, topic = self._errors[0]
            self._errors.clear()
            raise self._hard(first, "delivering records", topic)

    def _abort(self) -> None:
        self._errors.clear()
        self._txn_topics.clear()
        try:
            self.producer.abort_transaction(TRANSACTION_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("aborting the Kafka transaction failed (the next start fences it): %s", exc)

    def _hard(self, error: KafkaError, doing: str, topic: str | None = None) -> HardFailure:
        """A clear HardFailure; for a topic error, re-checks which destination is missing."""
        if error.code() in _HARD_CODES:
            try:
                check_topics(self.admin, self.destinations, self.routes.path)
            except HardFailure as found:
                return found
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and topic:
            # It may describe the topic (so the check above passed) but not write it.
            return HardFailure(f"not authorised to write Kafka topic {topic} (routes file {self.routes.path}; "
                               f"bridge {self.routes.bridge_id}): {error.str()}")
        return HardFailure(f"Kafka bridge {self.routes.bridge_id}: {doing} failed: {error.str()} "
                           f"({error.name()})")


def _kafka_route(route: Route | None) -> Route | None:
    """``route`` if it goes to Kafka: a message whose first match is another kind's is not ours."""
    return route if route is not None and route.destination.kind == "kafka" else None


def _drops_non_persistent(route: Route) -> bool:
    return route.options.get("non-persistent") == "drop"


def _admin_conf(conf: dict[str, Any]) -> dict[str, Any]:
    keep = ("bootstrap.servers", "security.protocol", "client.id")
    return {k: v for k, v in conf.items() if k in keep or k.startswith(("sasl.", "ssl."))}
