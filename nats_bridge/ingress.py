"""JetStream ingress: a JetStream stream into a broker topic, with nothing stored twice.

Each message becomes a broker message with the deterministic id ``nats:<stream>:<sequence>``, so
publishing it again after a crash stores nothing (the broker answers with the original
coordinates). A NATS message is acknowledged only after the broker acknowledged its batch, so a
crash re-delivers at most the unacknowledged tail (after the consumer's ack wait), which the ids
make harmless. The headers (NATS headers, or the header protocol's, by ``headers``) become message
headers, with ``jmsbridge.origin`` and the hop count as for the other ingresses. A message the
broker refuses for itself (400, 413, 422: too large, too many headers...) is logged, counted in
``received_errors`` and skipped; a broker that is down or refuses the bridge (401, 403) is retried
with backoff, holding the stream back.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from nats.aio.msg import Msg

from driver import Template
from driver.errors import HTTPStatusError, ToyMBError
from journal_spark.routes import HOPS_HEADER, MAX_HOPS, ORIGIN_HEADER, DataError, hops_of

from .bridge import Bridge, Runtime
from .config import BridgeConfig
from .errors import DecodeError
from .forward import RETRY_INITIAL_S, _backoff, fetched, pull_subscription, release
from .mapping import from_nats

log = logging.getLogger(__name__)
REFUSED = (400, 413, 422)
"""Answers about the message itself (bad, too large, refused by an enricher): it is skipped, counted."""


def message_id(stream: str, msg: Msg) -> str:
    """The broker id of a JetStream message: ``nats:<stream>:<stream sequence>``."""
    return f"nats:{stream}:{msg.metadata.sequence.stream}"


class JetStreamIngress(Bridge):
    """JetStream durable consumer -> broker topic over HTTP (ids ``nats:<stream>:<seq>``)."""

    def __init__(self, config: BridgeConfig, rt: Runtime) -> None:
        super().__init__(config, rt)
        self._sub: Any = None
        self._stream = ""
        self._puller: asyncio.Task[None] | None = None
        self.broker = Template(config.broker_url, token=config.token)

    async def _subscribe(self) -> None:
        self._stream, self._sub = await pull_subscription(self, "source.nats.subject")
        self._puller = self._supervise(self._pull, "ingress")

    async def _unsubscribe(self) -> None:
        puller, sub, self._puller, self._sub = self._puller, self._sub, None, None
        await release(puller, sub)

    def convert(self, msg: Msg) -> dict[str, Any] | None:
        """The broker message for ``msg``; None when loop prevention drops it.

        Raises:
            DecodeError: ``headers=codec`` and a corrupt frame.
        """
        message = from_nats(msg.data, msg.headers, self.config.headers)
        headers = {name: str(value).lower() if isinstance(value, bool) else str(value)
                   for name, value in message.headers.items()}
        try:
            hops = hops_of(headers)
        except DataError:
            hops = 0      # a garbled count from a foreign publisher: the message starts counting here
        if hops >= MAX_HOPS:
            return None
        headers[ORIGIN_HEADER] = self.rt.bridge_id
        headers[HOPS_HEADER] = str(hops + 1)
        return {"id": message_id(self._stream, msg), "headers": headers,
                "content_type": "application/octet-stream", "body_base64": base64.b64encode(message.body).decode()}

    async def _pull(self) -> None:
        async for msgs in fetched(self, self._sub):
            batch: list[tuple[Msg, dict[str, Any]]] = []
            for msg in msgs:
                self.rt.metrics.received_count.labels(self.name).inc()
                try:
                    converted = self.convert(msg)
                except DecodeError as exc:
                    self._decode_failed(exc)
                    await msg.ack()
                    continue
                if converted is None:
                    await msg.ack()
                else:
                    batch.append((msg, converted))
            if batch:
                await self._publish(batch)
            await self.rt.nc.flush()

    async def _publish(self, batch: list[tuple[Msg, dict[str, Any]]]) -> None:
        delay = RETRY_INITIAL_S
        while True:
            try:
                await asyncio.to_thread(self.broker.publish_encoded, self.config.dest, [m for _, m in batch])
            except HTTPStatusError as exc:
                status = exc.status_code or 500
                if status not in REFUSED:
                    # The broker is down, busy, or will not take anything from us (401/403): nothing
                    # is skipped for that; the stream waits, and the status page says why.
                    self.rt.metrics.publish_errors.labels(self.name).inc()
                    self.last_error = f"broker answered {status}: {str(exc)[:200]}"
                    log.warning("%s: %s; retrying", self.name, self.last_error)
                    delay = await _backoff(delay)
                    continue
                if len(batch) > 1:
                    for one in batch:     # find the message the broker refuses; store the others
                        await self._publish([one])
                    return
                self.rt.metrics.received_errors.labels(self.name).inc()
                log.error("%s: the broker refuses %s, skipped: %s", self.name, batch[0][1]["id"], str(exc)[:300])
                await batch[0][0].ack()
                return
            except ToyMBError as exc:
                self.rt.metrics.publish_errors.labels(self.name).inc()
                log.warning("%s: broker unreachable (%s); retrying", self.name, str(exc)[:200])
                delay = await _backoff(delay)
                continue
            for msg, _ in batch:
                self.rt.metrics.publish_count.labels(self.name).inc()
                await msg.ack()
            return
