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

from ..routes import CONTENT_TYPE_HEADER, ORIGIN_HEADER
from .config import IngressConfig, describe
from .errors import JmsConfigError, JmsConnectionError
from .mapping import ID_LIST_HEADER, append_id, from_stomp
from .stompclient import Frame, StompClient

log = logging.getLogger(__name__)

STOPPED, STARTED, PAUSED, FAILED = "STOPPED", "STARTED", "PAUSED", "FAILED"


class PublishFailed(JmsConnectionError):
    """The broker could not be reached or answered 5xx: the batch is retried like a JMS failure."""


class JmsIngress:
    """One running ingress; thread-safe ``start``/``stop``/``pause``/``resume``/``status``."""

    def __init__(self, config: IngressConfig, metrics: Any | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.state = STOPPED
        self.message_count = 0
        self.aborted_count = 0
        self.batch_count = 0
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
            except JmsConfigError as exc:
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
        client = StompClient(cfg.stomp.url, client_id=cfg.client_id, user=cfg.stomp.user,
                             password=cfg.stomp.password).connect()
        headers = {"activemq.prefetchSize": str(cfg.max_batch_size)}
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
        messages = [self._convert(frame) for frame in batch]
        if cfg.qos == "AT_MOST_ONCE":
            try:
                self._ack(client, batch)
            except JmsConnectionError:
                self._aborted(len(batch), "the acknowledgement was not confirmed; dropping the batch")
                raise
            try:
                self._publish(messages)
            except PublishFailed:
                self._aborted(len(batch), "the broker did not take an acknowledged batch")
                raise
        else:
            self._publish(messages)
            self._ack(client, batch)
        self.message_count += len(batch)
        self.batch_count += 1
        if self.metrics is not None:
            self.metrics.messages.labels(cfg.name).inc(len(batch))
            self.metrics.batches.labels(cfg.name).inc()

    def _aborted(self, count: int, why: str) -> None:
        self.aborted_count += count
        if self.metrics is not None:
            self.metrics.aborted.labels(self.config.name).inc(count)
        log.warning("JMS ingress %s: %d messages aborted: %s", self.config.name, count, why)

    @staticmethod
    def _ack(client: StompClient, batch: list[Frame]) -> None:
        for i, frame in enumerate(batch):
            client.ack(frame.headers["ack"], wait=i == len(batch) - 1)

    def _convert(self, frame: Frame) -> dict[str, Any]:
        cfg = self.config
        message = from_stomp(frame.headers, frame.body)
        headers: dict[str, str] = message["headers"]
        jms_id = frame.headers.get("message-id", "")
        restored = headers.pop(CONTENT_TYPE_HEADER, None)
        if restored:
            message["content_type"] = restored
            if "body" in message and not restored.startswith("text/"):
                message["body_base64"] = _b64(message.pop("body").encode("utf-8"))
        if cfg.add_message_id and jms_id:
            headers[ID_LIST_HEADER] = append_id(headers.get(ID_LIST_HEADER), jms_id)
        headers[ORIGIN_HEADER] = cfg.bridge_id
        if cfg.qos == "ONCE_AND_ONLY_ONCE" and jms_id:
            message["id"] = jms_id
        return message

    def _publish(self, messages: list[dict[str, Any]]) -> None:
        """Publish the batch; 4xx for the batch means a bad message, so each is then tried alone."""
        if self._post(messages):
            return
        for message in messages:
            if not self._post([message]):
                self._aborted(1, f"the broker refused message {message.get('id') or '(no id)'}")

    def _post(self, messages: list[dict[str, Any]]) -> bool:
        """True when stored; False when the broker refused the messages themselves (a 4xx about them).

        Raises:
            PublishFailed: the broker cannot take them now, or refuses this bridge (retried later).
        """
        topic = self.config.dest_topic
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
