"""Forward bridges: every message of the source goes on to the destination, acknowledged only once delivered.

- JMS -> NATS: frames are taken in order; a batch is published, then confirmed (one flush for core
  NATS, one ack per message for JetStream, with ``Nats-Msg-Id`` = the JMS message id), then each JMS
  message is acknowledged. Until then it stays unacknowledged: a crash means redelivery, not loss.
- NATS -> JMS: each message is sent with a receipt. From a JetStream durable, the NATS message is
  acknowledged only after the receipt; from core NATS there is nothing to acknowledge.

A message that cannot be carried at all (a corrupt frame, or one version 1.0 cannot encode) is logged,
counted in ``publish_errors`` (and ``decode_errors``) and skipped: retrying could never succeed.
A destination that is down is retried with backoff, holding the source back meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig
from nats.js.errors import Error as JetStreamError
from nats.js.errors import NotFoundError

from .bridge import Bridge, Runtime
from .config import BridgeConfig
from .errors import BridgeUnavailable, DecodeError, EncodeError, NatsConfigError
from .jms import Frame
from .mapping import from_nats, from_stomp, to_nats, to_stomp

log = logging.getLogger(__name__)
BATCH = 100
RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 5.0
ACK_WAIT_S = 5.0


async def _backoff(delay: float) -> float:
    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
    return min(delay * 2, RETRY_MAX_S)


class JmsToNatsForward(Bridge):
    """JMS queue -> NATS subject (or JetStream); the JMS ack follows NATS's confirmation."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        super().__init__(config, rt)
        self._queue: asyncio.Queue[Frame] = asyncio.Queue()
        self._sub: str | None = None
        self._worker: asyncio.Task[None] | None = None
        self._js = rt.nc.jetstream() if config.dest_jetstream else None

    async def _subscribe(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = self._supervise(self._work, "forward")
        self._sub = await self._consume_source_queue(self._queue.put_nowait)

    async def _unsubscribe(self) -> None:
        if self._sub is not None:
            await self.rt.jms.unsubscribe(self._sub)
            self._sub = None

    async def stop(self, drain_s: float = 0.0) -> None:
        await super().stop(drain_s)
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None

    async def _work(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            ready: list[tuple[Frame, bytes, dict[str, str] | None]] = []
            for frame in batch:
                self.rt.metrics.received_count.labels(self.name).inc()
                try:
                    payload, headers = to_nats(from_stomp(frame.headers, frame.body), self.config.headers)
                except EncodeError as exc:
                    self.rt.metrics.publish_errors.labels(self.name).inc()
                    log.error("%s: JMS message %s cannot be carried to NATS, skipped: %s", self.name,
                              frame.headers.get("message-id"), exc)
                    await self._ack(frame)
                    continue
                ready.append((frame, payload, headers))
            delay = RETRY_INITIAL_S
            while ready:
                ready = [r for r in ready if r[0].generation == self.rt.jms.generation]   # others come again
                try:
                    await self._publish(ready)
                    break
                except (NatsError, JetStreamError, OSError) as exc:
                    self.rt.metrics.publish_errors.labels(self.name).inc()
                    log.warning("%s: publishing to %s failed (%s); retrying", self.name, self.config.dest, exc)
                    delay = await _backoff(delay)
            for frame, _, _ in ready:
                self.rt.metrics.publish_count.labels(self.name).inc()
                await self._ack(frame)

    async def _publish(self, batch: list[tuple[Frame, bytes, dict[str, str] | None]]) -> None:
        if self._js is not None:
            for frame, payload, headers in batch:
                msg_id = frame.headers.get("message-id", "")
                await self._js.publish(self.config.dest, payload, timeout=5,
                                       headers={**(headers or {}), "Nats-Msg-Id": msg_id})
            return
        for _, payload, headers in batch:
            await self.rt.nc.publish(self.config.dest, payload, headers=headers)
        await self.rt.nc.flush(timeout=5)

    async def _ack(self, frame: Frame) -> None:
        try:
            await self.rt.jms.ack(frame)
        except BridgeUnavailable as exc:
            log.info("%s: ack not sent (%s); ActiveMQ will redeliver", self.name, exc)


async def pull_subscription(bridge: Bridge, key: str) -> tuple[str, Any]:
    """A durable pull subscription on ``bridge``'s source subject, and the stream that holds it.

    Raises:
        NatsConfigError: no stream holds the subject (``key`` names the setting in the message).
    """
    js = bridge.rt.nc.jetstream()
    try:
        stream = await js.find_stream_name_by_subject(bridge.config.source)
    except NotFoundError:
        raise NatsConfigError(f"nats-bridge.{bridge.name}.{key}: no JetStream stream holds the subject "
                              f"{bridge.config.source}") from None
    # A message a crashed bridge fetched but never acknowledged comes again after ACK_WAIT_S.
    sub = await js.pull_subscribe(bridge.config.source, durable=bridge.config.jetstream_durable, stream=stream,
                                  config=ConsumerConfig(ack_wait=ACK_WAIT_S))
    return stream, sub


async def fetched(bridge: Bridge, sub: Any) -> AsyncIterator[list[Msg]]:
    """The batches a pull subscription fetches for ``bridge``, forever; a failed fetch is retried."""
    while True:
        try:
            msgs = await sub.fetch(min(BATCH, bridge.config.max_in_flight), timeout=1)
        except (NatsTimeout, TimeoutError):    # nats-py raises either when nothing came
            continue
        except (NatsError, JetStreamError) as exc:
            log.warning("%s: fetching from JetStream failed (%s); retrying", bridge.name, exc)
            await asyncio.sleep(0.5)
            continue
        yield msgs


async def release(puller: asyncio.Task[None] | None, sub: Any) -> None:
    """Stop a bridge's puller and drop its subscription (a pull one's fetch inbox: the durable stays)."""
    if puller is not None:
        puller.cancel()
    if sub is not None:
        await sub.unsubscribe()


class NatsToJmsForward(Bridge):
    """NATS subject (queue group) or JetStream durable -> JMS queue, sent with a receipt."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        super().__init__(config, rt)
        self._sub: Any = None
        self._puller: asyncio.Task[None] | None = None

    async def _subscribe(self) -> None:
        if self.config.jetstream_durable is None:
            self._sub = await self.rt.nc.subscribe(self.config.source, queue=self.config.queue_group or "",
                                                   cb=self._on_message)
            return
        _, self._sub = await pull_subscription(self, "source.jetstream.durable")
        self._puller = self._supervise(self._pull, "pull")

    async def _unsubscribe(self) -> None:
        puller, sub, self._puller, self._sub = self._puller, self._sub, None, None
        await release(puller, sub)

    async def _on_message(self, msg: Msg) -> None:
        await self._forward(msg)

    async def _pull(self) -> None:
        async for msgs in fetched(self, self._sub):
            for msg in msgs:
                if await self._forward(msg):
                    await self._ack_nats(msg)

    async def _ack_nats(self, msg: Msg) -> None:
        delay = RETRY_INITIAL_S
        for _ in range(5):
            try:
                await msg.ack_sync(timeout=5)
                return
            except (NatsError, JetStreamError) as exc:
                log.info("%s: JetStream ack failed (%s); retrying", self.name, exc)
                delay = await _backoff(delay)
        log.warning("%s: JetStream ack gave up; the message may be forwarded again", self.name)

    async def _forward(self, msg: Msg) -> bool:
        """Send one message on; True once ActiveMQ has it (or it is skipped for good)."""
        m = self.rt.metrics
        m.received_count.labels(self.name).inc()
        try:
            message = from_nats(msg.data, msg.headers, self.config.headers)
        except DecodeError as exc:
            self._decode_failed(exc)
            m.publish_errors.labels(self.name).inc()
            return True
        headers = to_stomp(message)
        delay = RETRY_INITIAL_S
        while True:
            try:
                await self.rt.jms.wait_connected(timeout=RETRY_MAX_S)
                await self.rt.jms.send(f"/queue/{self.config.dest}", message.body, headers, receipt=True)
            except BridgeUnavailable as exc:
                m.publish_errors.labels(self.name).inc()
                log.warning("%s: sending to JMS queue %s failed (%s); retrying", self.name, self.config.dest, exc)
                delay = await _backoff(delay)
                continue
            m.publish_count.labels(self.name).inc()
            return True
