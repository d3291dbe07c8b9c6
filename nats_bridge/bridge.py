"""The four kinds of bridge: request/reply and forward, NATS -> JMS and JMS -> NATS.

Every bridge runs on the process's event loop and shares its :class:`Runtime` (one NATS connection,
one STOMP connection, the metrics). Start/stop/pause/resume are coroutines; pausing unsubscribes the
source (a NATS queue group's other members, or the JMS queue's other consumers, take over) while
requests in flight finish.

Delivery:
- request/reply: a request is answered by its reply or, at its timeout, by an error (NATS: headers
  ``Nats-Service-Error``/``-Code``; JMS: properties ``nats_bridge_error``/``_code``), never both.
- forward JMS -> NatsClient: the JMS message is acknowledged only after NATS confirmed the publish (a flush,
  or JetStream's ack): at least once, exactly once into JetStream within its duplicate window
  (``Nats-Msg-Id`` = the JMS message id).
- forward NATS -> JMS: sent with a receipt; from JetStream (a durable pull consumer) the NATS message
  is acknowledged only after the receipt: at least once. From core NATS, what is published while no
  bridge is subscribed is lost (core NATS keeps nothing).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from .config import BridgeConfig
from .errors import BridgeUnavailable, DecodeError, EncodeError
from .jms import Frame, JmsConnection
from .mapping import (
    ERROR_CODE_PROPERTY,
    ERROR_PROPERTY,
    NATS_ERROR,
    NATS_ERROR_CODE,
    from_nats,
    from_stomp,
    to_nats,
    to_stomp,
)
from .metrics import BridgeMetrics
from .pending import PendingRequests

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """What every bridge of the process shares."""

    nc: NatsClient
    jms: JmsConnection
    metrics: BridgeMetrics
    instance: str
    bridge_id: str = "nats-bridge"


class Bridge:
    """Base: state, the background tasks, status."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        self.config = config
        self.rt = rt
        self.name = config.name
        self.state = "STOPPED"
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self.pending: PendingRequests[Any] | None = None
        self.last_error: str | None = None
        rt.metrics.register(self.name)
        rt.metrics.set_state(self.name, self.state)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s: %s", self.name, self.last_error, exc_info=exc)

    def _supervise(self, body: Callable[[], Awaitable[None]], name: str) -> asyncio.Task[None]:
        """Run a bridge's loop (a puller, a worker) as a task that an unexpected error cannot end.

        The error is logged with its traceback and shown as ``last_error``; the loop starts again a
        second later, so the messages it held come back (unacknowledged) instead of waiting forever.
        """
        async def run() -> None:
            while True:
                try:
                    await body()
                    return
                except Exception as exc:
                    self.last_error = f"{name}: {type(exc).__name__}: {exc}"[:500]
                    log.exception("%s: %s failed; starting it again in 1 s", self.name, name)
                    await asyncio.sleep(1)

        return asyncio.create_task(run(), name=f"{name}-{self.name}")

    def _set_state(self, state: str) -> None:
        self.state = state
        self.rt.metrics.set_state(self.name, state)

    async def start(self) -> None:
        if self.state == "STARTED":
            return
        await self._subscribe()
        self._set_state("STARTED")

    async def pause(self) -> None:
        if self.state == "STARTED":
            await self._unsubscribe()
            self._set_state("PAUSED")

    async def resume(self) -> None:
        if self.state == "PAUSED":
            await self._subscribe()
            self._set_state("STARTED")

    async def stop(self, drain_s: float = 0.0) -> None:
        if self.state == "STARTED":
            await self._unsubscribe()
        self._set_state("STOPPED")
        deadline = asyncio.get_running_loop().time() + drain_s
        while self.pending is not None and len(self.pending) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)

    async def _subscribe(self) -> None:
        raise NotImplementedError

    async def _unsubscribe(self) -> None:
        raise NotImplementedError

    def _count(self, name: str) -> int:
        value = self.rt.metrics.registry.get_sample_value(f"{name}_total", {"bridge": self.name})
        return int(value or 0)

    def status(self) -> dict[str, Any]:
        """State, counts and parameters (the management API's ``GET /bridges/<name>``)."""
        counts = {n: self._count(n) for n in (
            "received_count", "received_errors", "request_count", "request_errors", "request_response_count",
            "request_response_errors", "request_response_missing_count", "request_timeout_count",
            "late_reply_count", "publish_count", "publish_errors")}
        return {"name": self.name, "bridge_id": self.rt.bridge_id, "instance": self.rt.instance,
                "state": self.state, "pending": len(self.pending) if self.pending else 0,
                "nats_connected": self.rt.nc.is_connected, "jms_connected": self.rt.jms.connected,
                "last_error": self.last_error, "counts": counts, "parameters": self.config.describe()}

    # shared helpers -------------------------------------------------------------------------
    async def _consume_source_queue(self, handler: Callable[[Frame], None]) -> str:
        """Subscribe ``handler`` to the source JMS queue with client acknowledgements; returns the id.

        The prefetch is the in-flight cap: ActiveMQ sends no more until acknowledgements free slots.
        """
        return await self.rt.jms.subscribe(f"/queue/{self.config.source}", handler, ack="client-individual",
                                           headers={"activemq.prefetchSize": str(self.config.max_in_flight)})

    def _decode_failed(self, exc: DecodeError) -> None:
        self.rt.metrics.decode_errors.labels(self.name, exc.reason).inc()
        self.rt.metrics.received_errors.labels(self.name).inc()
        log.warning("%s: corrupt header-protocol frame: %s", self.name, exc)


# ======================================================================== request/reply NATS -> JMS
@dataclass
class _NatsRequest:
    reply_subject: str
    correlation_id: str | None


class NatsToJmsRequestReply(Bridge):
    """A NATS request becomes a JMS message with JMSReplyTo and JMSCorrelationID; the reply goes back."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        super().__init__(config, rt)
        self.prefix = f"{rt.instance}-{config.name}-"
        if config.reply_jms_queue:
            self.reply_to = f"/queue/{config.reply_jms_queue}"
        else:
            self.reply_to = f"/temp-queue/nb-{rt.instance}-{config.name}"
        self._sub: Any = None
        self._reply_sub: str | None = None

    async def start(self) -> None:
        if self.pending is None:
            self.pending = PendingRequests(self.name, self.rt.metrics, self.config.timeout_s,
                                           self.config.max_in_flight, self._timed_out)
        if self._reply_sub is None:
            # A shared reply queue: a selector keeps other bridge processes' replies for them.
            headers = ({"selector": f"JMSCorrelationID LIKE '{self.prefix}%'"} if self.config.reply_jms_queue
                       else {})
            self._reply_sub = await self.rt.jms.subscribe(self.reply_to, self._on_reply, ack="auto", headers=headers)
        await super().start()

    async def _subscribe(self) -> None:
        self._sub = await self.rt.nc.subscribe(self.config.source, queue=self.config.queue_group or "",
                                               cb=self._on_request)

    async def _unsubscribe(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def stop(self, drain_s: float = 0.0) -> None:
        await super().stop(drain_s)
        if self._reply_sub is not None:
            await self.rt.jms.unsubscribe(self._reply_sub)
            self._reply_sub = None

    async def _error_reply(self, subject: str, code: int, text: str) -> None:
        try:
            await self.rt.nc.publish(subject, b"", headers={NATS_ERROR: text, NATS_ERROR_CODE: str(code)})
        except NatsError as exc:
            log.warning("%s: could not send the error reply %d to %s: %s", self.name, code, subject, exc)

    async def _on_request(self, msg: Msg) -> None:
        m = self.rt.metrics
        m.received_count.labels(self.name).inc()
        if not msg.reply:
            m.received_errors.labels(self.name).inc()
            log.warning("%s: a message on %s without a reply subject is no request; dropped", self.name, msg.subject)
            return
        assert self.pending is not None
        try:
            message = from_nats(msg.data, msg.headers, self.config.headers)
        except DecodeError as exc:
            self._decode_failed(exc)
            await self._error_reply(msg.reply, 400, f"corrupt header-protocol frame: {exc}")
            return
        await self.pending.reserve()      # back-pressure: the subscription waits for a free slot
        key = f"{self.prefix}{next(self._ids)}"
        headers = to_stomp(message)
        headers.update({"correlation-id": key, "reply-to": self.reply_to})
        if "expires" not in headers:
            # ActiveMQ drops the request once nobody waits for its reply any more.
            headers["expires"] = str(int(time.time() * 1000 + self.config.timeout_s * 1000))
        self.pending.add(key, _NatsRequest(msg.reply, message.correlation_id))
        # Written without waiting: a stalled ActiveMQ must not hold back the subscription (the
        # requests behind would never reach the pending map, so never time out); the timer covers this one.
        try:
            self.rt.jms.send_nowait(f"/queue/{self.config.dest}", message.body, headers)
        except BridgeUnavailable as exc:
            self._send_failed(key, msg.reply, exc)
            return
        m.request_count.labels(self.name).inc()

    def _send_failed(self, key: str, reply_subject: str, exc: BridgeUnavailable) -> None:
        assert self.pending is not None
        if self.pending.fail(key) is not None:
            self.rt.metrics.request_errors.labels(self.name).inc()
            self._spawn(self._error_reply(reply_subject, 503, f"JMS unavailable: {exc}"))

    def _timed_out(self, key: str, request: _NatsRequest) -> None:
        self._spawn(self._error_reply(
            request.reply_subject, 504,
            f"no reply from JMS queue {self.config.dest} within {int(self.config.timeout_s * 1000)} ms"))

    def _on_reply(self, frame: Frame) -> None:
        assert self.pending is not None
        request = self.pending.resolve(frame.headers.get("correlation-id", ""))
        if request is not None:
            self._spawn(self._pass_reply(request, frame))

    async def _pass_reply(self, request: _NatsRequest, frame: Frame) -> None:
        m = self.rt.metrics
        reply = from_stomp(frame.headers, frame.body)
        # The requester sees its own correlation id again, not the bridge's.
        reply = dataclasses.replace(reply, correlation_id=request.correlation_id, redelivered=False)
        try:
            payload, headers = to_nats(reply, self.config.headers)
        except EncodeError as exc:
            m.request_response_errors.labels(self.name).inc()
            await self._error_reply(request.reply_subject, 502, f"the JMS reply cannot be carried: {exc}")
            return
        try:
            await self.rt.nc.publish(request.reply_subject, payload, headers=headers)
        except NatsError as exc:
            m.request_response_errors.labels(self.name).inc()
            log.warning("%s: reply to %s lost: %s", self.name, request.reply_subject, exc)
            return
        m.request_response_count.labels(self.name).inc()


# ======================================================================== request/reply JMS -> NATS
@dataclass
class _JmsRequest:
    frame: Frame
    reply_to: str
    correlation_id: str


class JmsToNatsRequestReply(Bridge):
    """A JMS message with JMSReplyTo becomes a NATS request; the reply goes to JMSReplyTo."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        super().__init__(config, rt)
        prefix = config.reply_nats_prefix or f"_INBOX.nb{uuid.uuid4().hex[:16]}"
        self.reply_prefix = f"{prefix}.{rt.instance}"
        self._inbox: Any = None
        self._sub: str | None = None

    async def start(self) -> None:
        if self.pending is None:
            self.pending = PendingRequests(self.name, self.rt.metrics, self.config.timeout_s,
                                           self.config.max_in_flight, self._timed_out)
        if self._inbox is None:
            self._inbox = await self.rt.nc.subscribe(f"{self.reply_prefix}.*", cb=self._on_reply)
        await super().start()

    async def _subscribe(self) -> None:
        self._sub = await self._consume_source_queue(self._on_request)

    async def _unsubscribe(self) -> None:
        if self._sub is not None:
            await self.rt.jms.unsubscribe(self._sub)
            self._sub = None

    async def stop(self, drain_s: float = 0.0) -> None:
        await super().stop(drain_s)
        if self._inbox is not None:
            await self._inbox.unsubscribe()
            self._inbox = None

    def _on_request(self, frame: Frame) -> None:
        self._spawn(self._request(frame))

    async def _ack(self, frame: Frame) -> None:
        try:
            await self.rt.jms.ack(frame)
        except BridgeUnavailable as exc:
            log.info("%s: ack not sent (%s); ActiveMQ will redeliver", self.name, exc)

    async def _error_reply(self, request: _JmsRequest, code: int, text: str) -> None:
        headers = {"correlation-id": request.correlation_id, ERROR_PROPERTY: text, ERROR_CODE_PROPERTY: str(code)}
        try:
            await self.rt.jms.send(request.reply_to, b"", headers, receipt=True)
        except BridgeUnavailable as exc:
            log.warning("%s: error reply to %s not sent (%s)", self.name, request.reply_to, exc)
            return
        await self._ack(request.frame)

    async def _request(self, frame: Frame) -> None:
        m = self.rt.metrics
        m.received_count.labels(self.name).inc()
        reply_to = frame.headers.get("reply-to")
        correlation = frame.headers.get("correlation-id") or frame.headers.get("message-id", "")
        if not reply_to:
            m.received_errors.labels(self.name).inc()
            log.warning("%s: JMS message %s has no JMSReplyTo: no request; acknowledged and dropped", self.name,
                        frame.headers.get("message-id"))
            await self._ack(frame)
            return
        request = _JmsRequest(frame, reply_to, correlation)
        try:
            payload, headers = to_nats(from_stomp(frame.headers, frame.body), self.config.headers)
        except EncodeError as exc:
            m.request_errors.labels(self.name).inc()
            await self._error_reply(request, 400, f"the request cannot be carried to NATS: {exc}")
            return
        assert self.pending is not None
        await self.pending.reserve()
        key = str(next(self._ids))
        self.pending.add(key, request)
        try:
            await self.rt.nc.publish(self.config.dest, payload, reply=f"{self.reply_prefix}.{key}", headers=headers)
        except NatsError as exc:
            self.pending.fail(key)
            m.request_errors.labels(self.name).inc()
            await self._error_reply(request, 503, f"NATS unavailable: {exc}")
            return
        m.request_count.labels(self.name).inc()

    def _timed_out(self, key: str, request: _JmsRequest) -> None:
        self._spawn(self._error_reply(
            request, 504, f"no reply from NATS subject {self.config.dest} within "
                          f"{int(self.config.timeout_s * 1000)} ms"))

    async def _on_reply(self, msg: Msg) -> None:
        assert self.pending is not None
        request = self.pending.resolve(msg.subject.rsplit(".", 1)[-1])
        if request is not None:
            self._spawn(self._pass_reply(request, msg))

    async def _pass_reply(self, request: _JmsRequest, msg: Msg) -> None:
        m = self.rt.metrics
        if msg.headers and msg.headers.get("Status") == "503":
            m.request_response_errors.labels(self.name).inc()
            await self._error_reply(request, 503, f"no NATS responder on {self.config.dest}")
            return
        try:
            reply = from_nats(msg.data, msg.headers, self.config.headers)
        except DecodeError as exc:
            self._decode_failed(exc)
            m.request_response_errors.labels(self.name).inc()
            await self._error_reply(request, 502, f"corrupt reply frame: {exc}")
            return
        headers = to_stomp(reply)
        headers["correlation-id"] = request.correlation_id
        if msg.headers and NATS_ERROR in msg.headers:
            headers[ERROR_PROPERTY] = msg.headers[NATS_ERROR]
            headers[ERROR_CODE_PROPERTY] = msg.headers.get(NATS_ERROR_CODE, "500")
        try:
            await self.rt.jms.send(request.reply_to, reply.body, headers, receipt=True)
        except BridgeUnavailable as exc:
            m.request_response_errors.labels(self.name).inc()
            log.warning("%s: reply to %s not sent (%s); the request is redelivered", self.name, request.reply_to, exc)
            return
        m.request_response_count.labels(self.name).inc()
        await self._ack(request.frame)
