"""ActiveMQ over STOMP 1.2 for an asyncio bridge: one connection, subscriptions, receipts, reconnection.

``stomp.py`` runs its own receiver thread; its callbacks hop onto the event loop with
``call_soon_threadsafe``, and every write runs on one executor thread, in order, so the loop never
blocks on a socket. When the connection drops, it reconnects with exponential backoff and jitter and
subscribes again; callers see :class:`BridgeUnavailable` meanwhile (or wait with :meth:`wait_connected`).
Messages not acknowledged before a drop go back to ActiveMQ, which redelivers them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import stomp
from stomp.exception import StompException

from .config import Connections
from .errors import BridgeUnavailable

log = logging.getLogger(__name__)
_ids = itertools.count(1)


@dataclass(slots=True)
class Frame:
    """A STOMP MESSAGE: its headers and raw body."""

    headers: dict[str, str]
    body: bytes
    generation: int = 0     # the connection it came on: an ack on a later connection would be refused


@dataclass
class _Subscription:
    destination: str
    ack: str
    headers: dict[str, str]
    handler: Callable[[Frame], None]
    active: bool = True
    sub_id: str = field(default_factory=lambda: f"s-{next(_ids)}")


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, owner: JmsConnection, generation: int) -> None:
        self.owner = owner
        self.generation = generation

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.owner.loop.call_soon_threadsafe(fn, self.generation, *args)
        except RuntimeError:    # the loop is closed: the process is ending
            pass

    def on_message(self, frame: Any) -> None:
        body = frame.body if isinstance(frame.body, bytes) else str(frame.body).encode("utf-8")
        self._post(self.owner._on_message, Frame(dict(frame.headers), body))

    def on_receipt(self, frame: Any) -> None:
        self._post(self.owner._on_receipt, frame.headers.get("receipt-id", ""))

    def on_error(self, frame: Any) -> None:
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
        self._post(self.owner._on_broken, f"ERROR frame: {frame.headers.get('message', '')} {body[:300]}".strip())

    def on_disconnected(self) -> None:
        self._post(self.owner._on_broken, "disconnected")


class JmsConnection:
    """The bridge's one STOMP connection to ActiveMQ."""

    def __init__(self, settings: Connections, on_state: Callable[[bool], None] | None = None,
                 receipt_timeout: float = 10.0) -> None:
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.on_state = on_state
        self.receipt_timeout = receipt_timeout
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stomp-write")
        self._conn: stomp.Connection12 | None = None
        self._generation = 0
        self._connected = asyncio.Event()
        self._receipts: dict[str, asyncio.Future[None]] = {}
        self._subs: dict[str, _Subscription] = {}
        self._reconnect: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def generation(self) -> int:
        """Which connection is current: a frame of an older one can no longer be acknowledged."""
        return self._generation

    # ------------------------------------------------------------------------ connecting
    def _connect_blocking(self, generation: int) -> stomp.Connection12:
        s = self.settings
        conn = stomp.Connection12([(s.stomp_host, s.stomp_port)], auto_decode=False, auto_content_length=False,
                                  reconnect_attempts_max=1, timeout=10, heartbeats=(0, 0))
        conn.set_listener("nats-bridge", _Listener(self, generation))
        try:
            conn.connect(s.stomp_user, s.stomp_password, wait=True)
        except (StompException, OSError) as exc:
            _drop(conn)
            raise BridgeUnavailable(f"cannot connect to ActiveMQ at {s.stomp_host}:{s.stomp_port}: "
                                    f"{exc or type(exc).__name__}") from None
        sock = getattr(conn.transport, "socket", None)
        if sock is not None:
            # Requests are small frames: do not let Nagle hold one back waiting for an ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    async def start(self) -> None:
        """Connect now if ActiveMQ answers; otherwise keep trying in the background."""
        self._reconnect = asyncio.create_task(self._reconnect_loop(), name="jms-reconnect")

    async def _reconnect_loop(self) -> None:
        delay = self.settings.jms_reconnect_initial_s
        while not self._closed:
            generation = self._generation + 1
            try:
                conn = await self.loop.run_in_executor(self._writer, self._connect_blocking, generation)
            except BridgeUnavailable as exc:
                log.warning("%s; retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, self.settings.jms_reconnect_max_s)
                continue
            self._generation, self._conn = generation, conn
            try:
                for sub in self._subs.values():
                    if sub.active:
                        await self._send_subscribe(sub)
            except BridgeUnavailable as exc:
                log.warning("subscribing again after reconnecting failed: %s", exc)
                self._on_broken(generation, str(exc))
                continue
            log.info("connected to ActiveMQ at %s:%d", self.settings.stomp_host, self.settings.stomp_port)
            self._connected.set()
            if self.on_state:
                self.on_state(True)
            return

    def _on_broken(self, generation: int, why: str) -> None:
        if generation != self._generation or self._closed:
            return
        self._generation += 1          # frames of the dead connection are ignored from now on
        conn, self._conn = self._conn, None
        was = self._connected.is_set()
        self._connected.clear()
        if was:
            log.warning("lost ActiveMQ (%s); reconnecting", why)
            if self.on_state:
                self.on_state(False)
        for future in self._receipts.values():
            if not future.done():
                future.set_exception(BridgeUnavailable(f"ActiveMQ connection lost: {why}"))
        self._receipts.clear()
        if conn is not None:
            # Not on the writer: closing a dead connection can block, and the next one needs the writer.
            threading.Thread(target=_drop, args=(conn,), name="stomp-drop", daemon=True).start()
        if self._reconnect is None or self._reconnect.done():
            self._reconnect = asyncio.create_task(self._reconnect_loop(), name="jms-reconnect")

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Return once connected; :class:`BridgeUnavailable` after ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            raise BridgeUnavailable("ActiveMQ is not connected") from None

    async def close(self) -> None:
        self._closed = True
        if self._reconnect is not None:
            self._reconnect.cancel()
        conn, self._conn = self._conn, None
        self._connected.clear()
        if conn is not None:
            await self.loop.run_in_executor(self._writer, _drop, conn)
        self._writer.shutdown(wait=False)

    # --------------------------------------------------------------------------- frames
    def _on_message(self, generation: int, frame: Frame) -> None:
        if generation != self._generation:
            return
        sub = self._subs.get(frame.headers.get("subscription", ""))
        frame.generation = generation
        if sub is not None and sub.active:
            sub.handler(frame)

    def _on_receipt(self, generation: int, receipt: str) -> None:
        future = self._receipts.pop(receipt, None)
        if future is not None and not future.done():
            future.set_result(None)

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, receipt: bool = False,
                    **kwargs: Any) -> None:
        conn, generation = self._conn, self._generation
        if conn is None or not self._connected.is_set() and what != "SUBSCRIBE":
            raise BridgeUnavailable(f"{what}: ActiveMQ is not connected")
        waiter: asyncio.Future[None] | None = None
        if receipt:
            rid = f"r-{next(_ids)}"
            waiter = self.loop.create_future()
            self._receipts[rid] = waiter
            kwargs.setdefault("headers", {})["receipt"] = rid

        def run() -> None:
            fn(conn, *args, **kwargs)

        try:
            await self.loop.run_in_executor(self._writer, run)
        except (StompException, OSError) as exc:
            self._on_broken(generation, f"{what} failed: {exc or type(exc).__name__}")
            raise BridgeUnavailable(f"{what} to ActiveMQ failed: {exc or type(exc).__name__}") from None
        if waiter is not None:
            try:
                await asyncio.wait_for(waiter, self.receipt_timeout)
            except TimeoutError:
                self._on_broken(generation, f"no receipt for {what}")
                raise BridgeUnavailable(f"ActiveMQ confirmed no {what} within {self.receipt_timeout} s") from None

    async def send(self, destination: str, body: bytes, headers: dict[str, str], receipt: bool = False) -> None:
        """SEND; with ``receipt``, return only once ActiveMQ has it (persisted, for a persistent message)."""
        await self._call("SEND", lambda c, *a, **k: c.send(*a, **k), destination, body, receipt=receipt,
                         headers=dict(headers))

    def send_nowait(self, destination: str, body: bytes, headers: dict[str, str],
                    on_error: Callable[[BridgeUnavailable], None]) -> None:
        """Queue a SEND on the writer thread and return at once (the request/reply fast path).

        ``on_error`` runs on the loop if the write fails; :class:`BridgeUnavailable` at once when
        ActiveMQ is not connected.
        """
        conn, generation = self._conn, self._generation
        if conn is None or not self._connected.is_set():
            raise BridgeUnavailable("SEND: ActiveMQ is not connected")

        def failed(exc: BaseException) -> None:
            self._on_broken(generation, f"SEND failed: {exc or type(exc).__name__}")
            on_error(BridgeUnavailable(f"SEND to ActiveMQ failed: {exc or type(exc).__name__}"))

        def run() -> None:
            try:
                conn.send(destination, body, headers=headers)
            except (StompException, OSError) as exc:
                try:
                    self.loop.call_soon_threadsafe(failed, exc)
                except RuntimeError:    # the loop is closed: the process is ending
                    pass

        self._writer.submit(run)

    async def ack(self, frame: Frame) -> None:
        """Acknowledge one message of a ``client-individual`` subscription.

        A message that came on an earlier connection is not acknowledged: ActiveMQ redelivers it anyway.
        """
        if frame.generation != self._generation:
            raise BridgeUnavailable("the message came on a connection since lost; ActiveMQ redelivers it")
        await self._call("ACK", lambda c, ack_id: c.ack(ack_id), frame.headers.get("ack", ""))

    async def _send_subscribe(self, sub: _Subscription) -> None:
        await self._call("SUBSCRIBE", lambda c, *a, **k: c.subscribe(*a, **k), sub.destination, sub.sub_id,
                         ack=sub.ack, receipt=True, headers=dict(sub.headers))

    async def subscribe(self, destination: str, handler: Callable[[Frame], None], ack: str = "auto",
                        headers: dict[str, str] | None = None) -> str:
        """Subscribe (again after every reconnection); ``handler`` runs on the loop. Returns the id."""
        sub = _Subscription(destination, ack, dict(headers or {}), handler)
        self._subs[sub.sub_id] = sub
        if self._connected.is_set():
            await self._send_subscribe(sub)
        return sub.sub_id

    async def unsubscribe(self, sub_id: str) -> None:
        """Stop a subscription; its unacknowledged messages go back to ActiveMQ."""
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            return
        sub.active = False
        if self._connected.is_set():
            try:
                await self._call("UNSUBSCRIBE", lambda c, s: c.unsubscribe(s), sub_id, receipt=True)
            except BridgeUnavailable:
                pass   # the connection is gone, and the subscription with it


def _drop(conn: stomp.Connection12) -> None:
    try:
        conn.disconnect()
    except Exception:  # noqa: BLE001 - already broken
        pass
    try:
        conn.transport.stop()
    except Exception:  # noqa: BLE001
        pass
