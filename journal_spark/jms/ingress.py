"""A JMS queue or topic subscription into a broker topic, with the Artemis JMS bridge's guarantees.

QoS, over a STOMP ``client-individual`` subscription:

- ``AT_MOST_ONCE``: the batch is acknowledged (and the last ACK's receipt awaited) *before* it is
  published. If the ACK is not confirmed the batch is dropped (counted as aborted), since ActiveMQ
  may deliver it again: never a duplicate, possibly a loss.
- ``DUPLICATES_OK``: published first (the broker answered 2xx, so it is committed), then
  acknowledged. A failure in between redelivers the batch: never a loss, possibly a duplicate.
- ``ONCE_AND_ONLY_ONCE``: ``DUPLICATES_OK`` with the JMS message id as the broker message id; the
  broker stores an id once per topic, so a redelivery stores nothing twice.

Batches flush at ``max-batch-size`` messages or when the *first* message of the batch is
``max-batch-time`` ms old (Artemis restarts its timer at every message, so a steady trickle never
flushes there). ``activemq.prefetchSize`` is the batch size, so at most one batch is in memory.

Messages it cannot bring in (seed ``000_…``'s soft failures, handled by ``routing.on-error``): a
MapMessage or ObjectMessage (recognised with the connection's ``detect.types``), and under
``ONCE_AND_ONLY_ONCE`` a NON_PERSISTENT message (seed ``001_…``: the mode "is only available for
durable messages"). ``fail`` stops the ingress (``FAILED``, the message stays in ActiveMQ);
``skip`` logs, counts and acknowledges it; ``dead-letter`` publishes it to the broker topic
``routing.dead-letter.topic`` with ``toymb.dlq.*`` headers, then acknowledges it. With
``non-persistent=drop`` NON_PERSISTENT messages are acknowledged and counted, not brought in.

Failures (ActiveMQ or the broker unreachable) close the connection (unacknowledged messages go
back to ActiveMQ), wait ``failure-retry-interval`` and reconnect, ``max-retries`` times (-1:
forever). Then the ingress is ``FAILED`` (state, metric, log line) until :meth:`start` is called.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from driver import Template
from driver.errors import HTTPStatusError, TransportError

from ..header_names import ID_LIST_HEADER
from ..routes import CONTENT_TYPE_HEADER, DataError, is_non_persistent, mark_arrival
from .config import IngressConfig, describe
from .errors import JmsConfigError, JmsConnectionError, JmsError
from .mapping import append_id, from_stomp
from .stompclient import Frame, StompClient

log = logging.getLogger(__name__)

STOPPED, STARTED, PAUSED, FAILED = "STOPPED", "STARTED", "PAUSED", "FAILED"


class PublishFailed(JmsConnectionError):
    """The broker could not be reached or answered 5xx: the batch is retried like a JMS failure."""


class IngressStopped(JmsError):
    """A message the ingress cannot bring in, under ``routing.on-error=fail``: the ingress stops."""


TYPED_TRANSFORMATIONS = {"jms-map-json": "MapMessage", "jms-object-json": "ObjectMessage",
                         "jms-map-xml": "MapMessage", "jms-object-xml": "ObjectMessage"}


class JmsIngress:
    """One running ingress; thread-safe ``start``/``stop``/``pause``/``resume``/``status``."""

    def __init__(self, config: IngressConfig, metrics: Any | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.state = STOPPED
        self.message_count = 0
        self.aborted_count = 0
        self.batch_count = 0
        self.skipped: dict[str, int] = {}        # reason -> messages not brought in on purpose
        self.dead_lettered = 0
        self.last_error: str | None = None
        self.attempts: deque[float] = deque(maxlen=100)   # wall-clock time of each connection attempt
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # The driver's client, with no retries of its own: _post decides what is retried.
        self._broker = Template(config.broker_url, token=config.token, timeout=30.0, retries=0)

    # ----------------------------------------------------------------------------- control
    def start(self) -> None:
        """Start (or restart after ``FAILED``/``stop``); a no-op while running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._paused.clear()
            self.last_error = None
            self._set_state(STARTED)
            self._thread = threading.Thread(
                target=self._run, name=f"jms-ingress-{self.config.name}", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop after the batch in hand; unacknowledged messages stay in ActiveMQ."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            if self.state != FAILED:
                self._set_state(STOPPED)

    def pause(self) -> None:
        """Stop publishing; received messages wait (unacknowledged, at most one batch)."""
        if self.state == STARTED:
            self._paused.set()
            self._set_state(PAUSED)

    def resume(self) -> None:
        if self.state == PAUSED:
            self._paused.clear()
            self._set_state(STARTED)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "kind": "jms-ingress",
            "state": self.state,
            "failed": self.state == FAILED,
            "message_count": self.message_count,
            "aborted_count": self.aborted_count,
            "batches": self.batch_count,
            "skipped": dict(self.skipped),
            "dead_lettered": self.dead_lettered,
            "last_error": self.last_error,
            "connection_attempts": len(self.attempts),
            "parameters": describe(self.config),
        }

    def _set_state(self, state: str) -> None:
        self.state = state
        if self.metrics is not None:
            self.metrics.state(self.config.name, state)

    # ----------------------------------------------------------------------------- loop
    def _run(self) -> None:
        cfg = self.config
        failures = 0
        while not self._stop.is_set():
            client: StompClient | None = None
            try:
                self.attempts.append(time.time())
                client = self._connect()
                failures = 0
                self._pump(client)
                return
            except (JmsConfigError, IngressStopped) as exc:
                self._fail(str(exc))
                return
            except JmsConnectionError as exc:
                self.last_error = str(exc)
                if self.metrics is not None:
                    self.metrics.failures.labels(cfg.name).inc()
                if cfg.max_retries != -1 and failures >= cfg.max_retries:
                    self._fail(f"{exc} (gave up after {failures} retries)")
                    return
                failures += 1
                log.warning(
                    "JMS ingress %s: %s; retry %d%s in %d ms",
                    cfg.name,
                    exc,
                    failures,
                    "" if cfg.max_retries == -1 else f"/{cfg.max_retries}",
                    cfg.failure_retry_interval_ms,
                )
            finally:
                if client is not None:
                    client.close()
            if self._stop.wait(cfg.failure_retry_interval_ms / 1000):
                return

    def _fail(self, reason: str) -> None:
        self.last_error = reason
        self._set_state(FAILED)
        log.error("JMS ingress %s FAILED: %s (start it again to retry)", self.config.name, reason)

    def _connect(self) -> StompClient:
        cfg = self.config
        client = StompClient(cfg.stomp.url, client_id=cfg.client_id, **cfg.stomp.client_options()).connect()
        headers = {"activemq.prefetchSize": str(cfg.max_batch_size)}
        if cfg.stomp.detect_types:
            headers["transformation"] = "jms-json"
        if cfg.selector:
            headers["selector"] = cfg.selector
        if cfg.subscription_name:
            headers["activemq.subscriptionName"] = cfg.subscription_name
        try:
            client.subscribe(cfg.destination, "ingress", ack="client-individual", headers=headers)
        except JmsConnectionError as exc:
            client.close()
            if "selector" in str(exc).lower() or "InvalidSelector" in str(exc):
                raise JmsConfigError(f"JMS ingress {cfg.name}: ActiveMQ refused the selector "
                                     f"{cfg.selector!r}: {exc}") from None
            if cfg.stomp.detect_types:
                raise JmsConnectionError(f"{exc} (detect.types subscribes with transformation: jms-json, "
                                         "which needs XStream and Jettison on ActiveMQ's class path)") from None
            raise
        log.info(
            "JMS ingress %s: consuming %s (%s) into %s", cfg.name, cfg.destination, cfg.qos, cfg.dest_topic
        )
        return client

    def _pump(self, client: StompClient) -> None:
        """Gather batches and forward them until stopped; raises on a connection failure."""
        cfg = self.config
        age_limit = cfg.max_batch_time_ms / 1000 if cfg.max_batch_time_ms > 0 else None
        batch: list[Frame] = []
        first_at = 0.0
        while not self._stop.is_set():
            if self._paused.is_set():
                self._stop.wait(0.1)
                client.check()     # notice a dead connection while paused
                continue
            wait = 0.2
            if batch and age_limit is not None:
                wait = max(0.0, min(wait, first_at + age_limit - time.monotonic()))
            frame = client.receive(wait)
            if frame is not None:
                if not batch:
                    first_at = time.monotonic()
                batch.append(frame)
            full = len(batch) >= cfg.max_batch_size
            old = bool(batch) and age_limit is not None and time.monotonic() - first_at >= age_limit
            if full or old:
                self._forward(client, batch)
                batch = []

    def _forward(self, client: StompClient, batch: list[Frame]) -> None:
        cfg = self.config
        messages, letters = self._sort(batch)
        if cfg.qos == "AT_MOST_ONCE":
            try:
                self._ack(client, batch)
            except JmsConnectionError:
                self._aborted(len(batch), "the acknowledgement was not confirmed; dropping the batch")
                raise
            try:
                self._publish(messages)
                self._publish_letters(letters)
            except PublishFailed:
                self._aborted(len(batch), "the broker did not take an acknowledged batch")
                raise
        else:
            self._publish(messages)
            self._publish_letters(letters)
            self._ack(client, batch)
        self.message_count += len(messages)
        self.batch_count += 1
        if self.metrics is not None:
            self.metrics.messages.labels(cfg.name).inc(len(messages))
            self.metrics.batches.labels(cfg.name).inc()

    def _sort(self, batch: list[Frame]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The batch as broker messages to publish, and dead letters; skips are counted here.

        Raises:
            IngressStopped: a message cannot be brought in and ``routing.on-error`` is ``fail``.
        """
        cfg = self.config
        messages: list[dict[str, Any]] = []
        letters: list[dict[str, Any]] = []
        for frame in batch:
            try:
                message = self._convert(frame)
            except DataError as exc:
                where = f"JMS ingress {cfg.name}: message {frame.headers.get('message-id', '?')}"
                if cfg.on_error == "fail":
                    raise IngressStopped(f"{where}: {exc}; routing.on-error=fail stops the ingress "
                                         "(set skip or dead-letter to go on)") from None
                self._count_skip(exc.reason, log_it=False)
                if cfg.on_error == "skip":
                    log.warning("%s skipped: %s", where, exc)
                    continue
                letters.append(self._dead_letter(frame, exc))
                log.warning("%s dead-lettered to %s: %s", where, cfg.dead_letter_topic, exc)
                continue
            if message is not None:
                messages.append(message)
        return messages, letters

    def _count_skip(self, reason: str, log_it: bool = True) -> None:
        first = reason not in self.skipped
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics.skipped.labels(self.config.name, reason).inc()
        if log_it:
            log.log(logging.WARNING if first else logging.DEBUG, "JMS ingress %s: not brought in (%s)%s",
                    self.config.name, reason, "; further ones are counted" if first else "")

    def _dead_letter(self, frame: Frame, exc: DataError) -> dict[str, Any]:
        message = from_stomp(frame.headers, frame.body)
        jms_id = frame.headers.get("message-id", "")
        message["headers"].update({"toymb.dlq.reason": exc.reason, "toymb.dlq.error": str(exc)[:1000],
                                   "toymb.dlq.route": self.config.name,
                                   "toymb.dlq.source": f"{self.config.stomp.name}{self.config.destination}"})
        if jms_id:
            message["id"] = f"dlq:{jms_id}"       # a redelivered letter is stored once
        return message

    def _publish_letters(self, letters: list[dict[str, Any]]) -> None:
        if not letters:
            return
        topic = self.config.dead_letter_topic
        assert topic is not None
        if not self._post(letters, topic):
            raise PublishFailed(f"the broker refused the dead letters for {topic}")
        self.dead_lettered += len(letters)

    def _aborted(self, count: int, why: str) -> None:
        self.aborted_count += count
        if self.metrics is not None:
            self.metrics.aborted.labels(self.config.name).inc(count)
        log.warning("JMS ingress %s: %d messages aborted: %s", self.config.name, count, why)

    @staticmethod
    def _ack(client: StompClient, batch: list[Frame]) -> None:
        for i, frame in enumerate(batch):
            client.ack(frame.headers["ack"], wait=i == len(batch) - 1)

    def _convert(self, frame: Frame) -> dict[str, Any] | None:
        """The broker message for ``frame``; None when ``non-persistent=drop`` drops it.

        Raises:
            DataError: ``not-text-or-binary`` (a MapMessage or ObjectMessage), ``non-persistent``
                (NON_PERSISTENT under ONCE_AND_ONLY_ONCE).
        """
        cfg = self.config
        jms_id = frame.headers.get("message-id", "")
        kind = TYPED_TRANSFORMATIONS.get(frame.headers.get("transformation", ""))
        if kind is not None:
            raise DataError("not-text-or-binary", f"a JMS {kind} is neither text nor binary; only TextMessage "
                                                  "and BytesMessage are bridged")
        message = from_stomp(frame.headers, frame.body)
        headers: dict[str, str] = message["headers"]
        if is_non_persistent(headers):
            if cfg.drop_non_persistent:
                self._count_skip("non-persistent")
                return None
            if cfg.qos == "ONCE_AND_ONLY_ONCE":
                raise DataError("non-persistent", "ONCE_AND_ONLY_ONCE is only available for persistent "
                                                  "messages, and this one is NON_PERSISTENT")
        restored = headers.pop(CONTENT_TYPE_HEADER, None)
        if restored:
            message["content_type"] = restored
            if "body" in message and not restored.startswith("text/"):
                message["body_base64"] = _b64(message.pop("body").encode("utf-8"))
        if cfg.add_message_id and jms_id:
            headers[ID_LIST_HEADER] = append_id(headers.get(ID_LIST_HEADER), jms_id)
        mark_arrival(headers, cfg.bridge_id, cfg.stomp.system)
        if cfg.qos == "ONCE_AND_ONLY_ONCE" and jms_id:
            message["id"] = jms_id
        return message

    def _publish(self, messages: list[dict[str, Any]]) -> None:
        """Publish the batch; 4xx for the batch means a bad message, so each is then tried alone."""
        if not messages or self._post(messages):
            return
        for message in messages:
            if not self._post([message]):
                self._aborted(1, f"the broker refused message {message.get('id') or '(no id)'}")

    def _post(self, messages: list[dict[str, Any]], topic: str | None = None) -> bool:
        """True when stored; False when the broker refused the messages themselves (a 4xx about them).

        Raises:
            PublishFailed: the broker cannot take them now, or refuses this bridge (retried later).
        """
        topic = topic or self.config.dest_topic
        try:
            self._broker.publish_encoded(topic, messages)
        except HTTPStatusError as exc:
            status = exc.status_code or 500
            if status >= 500 or status in (401, 403, 404, 408, 429):
                raise PublishFailed(f"publishing to {topic}: {str(exc)[:300]}") from None
            log.warning("JMS ingress %s: %s", self.config.name, str(exc)[:300])
            return False
        except TransportError as exc:
            raise PublishFailed(f"cannot publish to {topic}: {type(exc).__name__}") from None
        return True


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")
