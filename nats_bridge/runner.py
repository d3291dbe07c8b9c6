"""The bridge process: connect both sides, start the bridges, serve management, stop on SIGTERM/SIGINT.

Management is the JMS ingress's HTTP API (:class:`journal_spark.jms.manage.ManagementServer`):
``GET /bridges``, ``GET /bridges/<name>``, ``POST /bridges/<name>/pause|resume|stop|start``, ``GET /metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import uuid
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

from journal_spark.jms.manage import ManagementServer

from .bridge import Bridge, JmsToNatsRequestReply, NatsToJmsRequestReply, Runtime
from .config import BridgeConfig, Connections, Settings
from .errors import BridgeUnavailable, NatsBridgeError
from .forward import JmsToNatsForward, NatsToJmsForward
from .ingress import JetStreamIngress
from .jms import JmsConnection
from .metrics import BridgeMetrics

log = logging.getLogger(__name__)
NATS_BACKOFF_MAX_S = 10.0
"""The longest wait between two NATS reconnection attempts (the backoff doubles up to it)."""
KINDS: dict[tuple[str, str], Callable[[BridgeConfig, Runtime], Bridge]] = {
    ("request-reply", "nats-to-jms"): NatsToJmsRequestReply,
    ("request-reply", "jms-to-nats"): JmsToNatsRequestReply,
    ("forward", "nats-to-jms"): NatsToJmsForward,
    ("forward", "jms-to-nats"): JmsToNatsForward,
    ("ingress", "jetstream-to-broker"): JetStreamIngress,
}


class ManagedBridge:
    """A bridge as the (threaded) management server sees it: every call runs on the bridge's loop."""

    def __init__(self, bridge: Bridge, loop: asyncio.AbstractEventLoop) -> None:
        self.bridge = bridge
        self.loop = loop

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def start(self) -> None:
        self._run(self.bridge.start())

    def stop(self) -> None:
        self._run(self.bridge.stop())

    def pause(self) -> None:
        self._run(self.bridge.pause())

    def resume(self) -> None:
        self._run(self.bridge.resume())

    def status(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            return self.bridge.status()

        result: dict[str, Any] = self._run(read())
        return result


async def connect_nats(c: Connections, name: str, metrics: BridgeMetrics, gave_up: asyncio.Event) -> NatsClient:
    """Connect to NATS, retrying with backoff until it answers; nats-py then reconnects by itself.

    ``gave_up`` is set when nats-py spent ``nats_reconnect_max`` attempts and closed the connection.
    """
    gauge = metrics.connected.labels("nats")

    async def closed() -> None:
        gauge.set(0)
        gave_up.set()

    async def disconnected() -> None:
        gauge.set(0)
        log.warning("lost NATS; reconnecting")

    async def reconnected() -> None:
        gauge.set(1)
        log.info("reconnected to NATS")

    async def error(exc: Exception) -> None:
        log.info("NATS: %s", exc or type(exc).__name__)

    def backoff(servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        # nats-py waits a fixed reconnect_time_wait; this doubles it per failed attempt, with jitter.
        server = min(servers, key=lambda s: s.reconnects)
        wait = min(c.nats_reconnect_wait_s * 2 ** min(server.reconnects, 16), NATS_BACKOFF_MAX_S)
        return server, wait * random.uniform(0.5, 1.0)

    delay = c.nats_reconnect_wait_s
    attempts = 0
    while True:
        try:
            nc = await nats.connect(
                servers=list(c.nats_servers), name=name, user=c.nats_user, password=c.nats_password,
                token=c.nats_token, connect_timeout=c.nats_connect_timeout_s,
                allow_reconnect=c.nats_reconnect_max != 0, reconnect_to_server_handler=backoff,
                max_reconnect_attempts=c.nats_reconnect_max, reconnect_time_wait=c.nats_reconnect_wait_s,
                disconnected_cb=disconnected, reconnected_cb=reconnected, error_cb=error, closed_cb=closed,
                ping_interval=5, max_outstanding_pings=2)
        except (OSError, nats.errors.Error) as exc:
            attempts += 1
            if 0 <= c.nats_reconnect_max < attempts:
                raise BridgeUnavailable(f"cannot connect to NATS at {','.join(c.nats_servers)} after {attempts} "
                                        f"attempts (nats.reconnect.max={c.nats_reconnect_max}): {exc}") from None
            log.warning("cannot connect to NATS at %s (%s); retrying in %.2f s", ",".join(c.nats_servers),
                        exc or type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        gauge.set(1)
        return nc


async def run(settings: Settings, host: str = "127.0.0.1", port: int = 0,
              ready: Callable[[int], None] | None = None) -> None:
    """Run every bridge of ``settings`` until SIGTERM or SIGINT; ``ready(port)`` once management serves."""
    loop = asyncio.get_running_loop()
    metrics = BridgeMetrics()
    instance = uuid.uuid4().hex[:12]
    nats_gone = asyncio.Event()
    nc = await connect_nats(settings.connections, f"toymb-nats-bridge-{settings.bridge_id}", metrics, nats_gone)
    jms = JmsConnection(settings.connections, on_state=lambda up: metrics.connected.labels("jms").set(int(up)))
    await jms.start()
    rt = Runtime(nc, jms, metrics, instance, settings.bridge_id)
    bridges = [KINDS[(c.type, c.direction)](c, rt) for c in settings.bridges]
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    server = ManagementServer({b.name: ManagedBridge(b, loop) for b in bridges}, metrics.registry,
                              host, port).start()
    try:
        for bridge in bridges:
            await bridge.start()
            log.info("bridge %s: %s %s %s -> %s", bridge.name, bridge.config.type, bridge.config.direction,
                     bridge.config.source, bridge.config.dest)
        if ready is not None:
            ready(server.port)
        waits = [asyncio.create_task(stopping.wait()), asyncio.create_task(nats_gone.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if nats_gone.is_set() and not stopping.is_set():
            raise BridgeUnavailable(f"NATS at {','.join(settings.connections.nats_servers)} is gone after "
                                    f"nats.reconnect.max={settings.connections.nats_reconnect_max} attempts")
        log.info("stopping: no new messages; waiting for the requests in flight")
        drain = max((b.config.timeout_s for b in bridges), default=0.0)
        await asyncio.gather(*(b.stop(drain) for b in bridges), return_exceptions=True)
    except NatsBridgeError:
        raise
    finally:
        server.close()
        await jms.close()
        try:
            await asyncio.wait_for(nc.drain(), 5)
        except (nats.errors.Error, OSError, TimeoutError):
            await nc.close()
