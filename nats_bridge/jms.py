"""ActiveMQ over STOMP 1.2 on the bridge's event loop: one connection, subscriptions, receipts, reconnection.

STOMP is spoken directly on an asyncio stream (no client threads): a request costs no thread
hand-off, and a write never blocks the loop (a peer that stops reading makes :meth:`send_nowait`
refuse once :data:`MAX_BUFFERED` bytes wait). When the connection drops, it reconnects with
exponential backoff and jitter and subscribes again; callers see :class:`BridgeUnavailable`
meanwhile (or wait with :meth:`wait_connected`). Messages not acknowledged before a drop go back to
ActiveMQ, which redelivers them.

Frames (STOMP 1.2): header values are escaped (``\\\\``, ``\\n``, ``\\r``, ``\\c``); a body with a
``content-length`` is read by length (ActiveMQ: a BytesMessage), one without up to its NUL (a
TextMessage).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import Connections
from .errors import BridgeUnavailable

log = logging.getLogger(__name__)
_ids = itertools.count(1)
MAX_BUFFERED = 8 << 20
"""Bytes waiting to be written to ActiveMQ beyond which new sends are refused: it is not reading."""
MAX_FRAME = 16 << 20
_ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\c": ":"}


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
    sub_id: str = field(default_factory=lambda: f"s-{next(_ids)}")


class ProtocolError(BridgeUnavailable):
    """ActiveMQ sent something that is not a STOMP frame (the connection is dropped and made again)."""


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(":", "\\c")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        pair = text[i:i + 2]
        if pair in _ESCAPES:
            out.append(_ESCAPES[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def encode_frame(command: str, headers: dict[str, str], body: bytes = b"", escape: bool = True) -> bytes:
    """One STOMP frame; header values escaped (not in CONNECT, as STOMP 1.2 says)."""
    lines = [command] + [f"{_escape(k) if escape else k}:{_escape(v) if escape else v}" for k, v in headers.items()]
    return ("\n".join(lines) + "\n\n").encode("utf-8") + body + b"\0"


async def read_frame(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """The next frame (heart-beat newlines skipped).

    Raises:
        asyncio.IncompleteReadError: the connection ended.
        ProtocolError: not a STOMP frame.
    """
    line = b"\n"
    while line in (b"\n", b"\r\n"):
        line = await reader.readuntil(b"\n")
    command = line.rstrip(b"\r\n").decode("utf-8", "replace")
    headers: dict[str, str] = {}
    while True:
        raw = (await reader.readuntil(b"\n")).rstrip(b"\r\n")
        if not raw:
            break
        try:
            key, sep, value = raw.decode("utf-8").partition(":")
        except UnicodeDecodeError:
            raise ProtocolError(f"a {command} frame has a header that is not UTF-8") from None
        if not sep:
            raise ProtocolError(f"a {command} frame has a header line without ':'")
        if command != "CONNECTED":
            key, value = _unescape(key), _unescape(value)
        headers.setdefault(key, value)      # STOMP 1.2: the first of repeated headers wins
    length = headers.get("content-length")
    if length is not None:
        try:
            size = int(length)
        except ValueError:
            raise ProtocolError(f"content-length {length!r}") from None
        if not 0 <= size <= MAX_FRAME:
            raise ProtocolError(f"content-length {size}")
        body = await reader.readexactly(size)
        if await reader.readexactly(1) != b"\0":
            raise ProtocolError(f"a {command} frame does not end with NUL after its content-length")
    else:
        body = (await reader.readuntil(b"\0"))[:-1]
    return command, headers, body


class JmsConnection:
    """The bridge's one STOMP connection to ActiveMQ."""

    def __init__(self, settings: Connections, on_state: Callable[[bool], None] | None = None,
                 receipt_timeout: float = 10.0) -> None:
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.on_state = on_state
        self.receipt_timeout = receipt_timeout
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
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
    async def start(self) -> None:
        """Connect now if ActiveMQ answers; otherwise keep trying in the background."""
        self._reconnect = asyncio.create_task(self._reconnect_loop(), name="jms-reconnect")

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        s = self.settings
        reader, writer = await asyncio.open_connection(s.stomp_host, s.stomp_port, limit=MAX_FRAME)
        headers = {"accept-version": "1.2", "host": s.stomp_host, "heart-beat": "0,0"}
        if s.stomp_user:
            headers.update({"login": s.stomp_user, "passcode": s.stomp_password or ""})
        writer.write(encode_frame("CONNECT", headers, escape=False))
        command, answer, body = await read_frame(reader)
        if command != "CONNECTED":
            writer.close()
            raise ProtocolError(f"{command} {answer.get('message', '')} {body[:200]!r}")
        return reader, writer

    async def _reconnect_loop(self) -> None:
        delay = self.settings.jms_reconnect_initial_s
        where = f"{self.settings.stomp_host}:{self.settings.stomp_port}"
        while not self._closed:
            try:
                reader, writer = await asyncio.wait_for(self._open(), 10)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ProtocolError) as exc:
                log.warning("cannot connect to ActiveMQ at %s (%s); retrying in %.2f s", where,
                            exc or type(exc).__name__, delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, self.settings.jms_reconnect_max_s)
                continue
            self._generation += 1
            generation = self._generation
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_loop(reader, generation), name="jms-read")
            try:
                for sub in list(self._subs.values()):
                    await self._send_subscribe(sub)
            except BridgeUnavailable as exc:
                log.warning("subscribing again after reconnecting failed: %s", exc)
                continue
            log.info("connected to ActiveMQ at %s", where)
            self._connected.set()
            if self.on_state:
                self.on_state(True)
            return

    async def _read_loop(self, reader: asyncio.StreamReader, generation: int) -> None:
        try:
            while True:
                command, headers, body = await read_frame(reader)
                if command == "MESSAGE":
                    sub = self._subs.get(headers.get("subscription", ""))
                    if sub is not None:
                        try:
                            sub.handler(Frame(headers, body, generation))
                        except Exception:
                            log.exception("handling message %s failed", headers.get("message-id"))
                elif command == "RECEIPT":
                    future = self._receipts.pop(headers.get("receipt-id", ""), None)
                    if future is not None and not future.done():
                        future.set_result(None)
                elif command == "ERROR":
                    text = f"ERROR frame: {headers.get('message', '')} {body[:300].decode('utf-8', 'replace')}"
                    log.warning("ActiveMQ: %s", text)
                    self._on_broken(generation, text)
                    return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError) as exc:
            self._on_broken(generation, f"{type(exc).__name__}: {exc}"[:300])

    def _on_broken(self, generation: int, why: str) -> None:
        if generation != self._generation or self._closed:
            return
        self._generation += 1          # frames of the dead connection are ignored from now on
        writer, self._writer = self._writer, None
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
        if writer is not None:
            writer.transport.abort()
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
        for task in (self._reconnect, self._reader_task):
            if task is not None:
                task.cancel()
        writer, self._writer = self._writer, None
        self._connected.clear()
        if writer is not None:
            try:
                writer.write(encode_frame("DISCONNECT", {}))
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 2)
            except (OSError, TimeoutError):
                pass

    # --------------------------------------------------------------------------- frames
    def _write(self, what: str, frame: bytes, allow_connecting: bool = False) -> int:
        """Queue ``frame`` on the socket; the generation it went out on."""
        writer = self._writer
        if writer is None or not (self._connected.is_set() or allow_connecting):
            raise BridgeUnavailable(f"{what}: ActiveMQ is not connected")
        if writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            raise BridgeUnavailable(f"{what}: ActiveMQ is not reading ({MAX_BUFFERED >> 20} MiB wait to be sent)")
        writer.write(frame)
        return self._generation

    async def _call(self, what: str, command: str, headers: dict[str, str], body: bytes = b"",
                    receipt: bool = False, allow_connecting: bool = False) -> None:
        waiter: asyncio.Future[None] | None = None
        if receipt:
            rid = f"r-{next(_ids)}"
            waiter = self.loop.create_future()
            self._receipts[rid] = waiter
            headers = {**headers, "receipt": rid}
        try:
            generation = self._write(what, encode_frame(command, headers, body), allow_connecting)
        except BridgeUnavailable:
            if waiter is not None:
                self._receipts.pop(headers["receipt"], None)
            raise
        if waiter is not None:
            try:
                await asyncio.wait_for(waiter, self.receipt_timeout)
            except TimeoutError:
                self._on_broken(generation, f"no receipt for {what}")
                raise BridgeUnavailable(f"ActiveMQ confirmed no {what} within {self.receipt_timeout} s") from None

    async def send(self, destination: str, body: bytes, headers: dict[str, str], receipt: bool = False) -> None:
        """SEND; with ``receipt``, return only once ActiveMQ has it (persisted, for a persistent message)."""
        await self._call("SEND", "SEND", {"destination": destination, **headers}, body, receipt=receipt)

    def send_nowait(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        """SEND without waiting (the request/reply fast path).

        Raises:
            BridgeUnavailable: ActiveMQ is not connected, or not reading.
        """
        self._write("SEND", encode_frame("SEND", {"destination": destination, **headers}, body))

    async def ack(self, frame: Frame) -> None:
        """Acknowledge one message of a ``client-individual`` subscription.

        A message that came on an earlier connection is not acknowledged: ActiveMQ redelivers it anyway.
        """
        if frame.generation != self._generation:
            raise BridgeUnavailable("the message came on a connection since lost; ActiveMQ redelivers it")
        self._write("ACK", encode_frame("ACK", {"id": frame.headers.get("ack", "")}))

    async def _send_subscribe(self, sub: _Subscription) -> None:
        await self._call("SUBSCRIBE", "SUBSCRIBE", {"id": sub.sub_id, "destination": sub.destination,
                                                    "ack": sub.ack, **sub.headers},
                         receipt=True, allow_connecting=True)

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
        if self._subs.pop(sub_id, None) is None:
            return
        try:
            await self._call("UNSUBSCRIBE", "UNSUBSCRIBE", {"id": sub_id}, receipt=True)
        except BridgeUnavailable:
            pass   # the connection is gone, and the subscription with it
