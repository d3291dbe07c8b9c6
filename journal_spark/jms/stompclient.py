"""A small synchronous face on ``stomp.py``: one STOMP 1.2 connection, receipts waited for, an inbox.

Both bridge directions need the same few things: send (inside a transaction), wait for a receipt
(so a COMMIT or an ACK is known to be done), receive frames with a timeout, and browse a queue to
its end (ActiveMQ's ``browser: true`` subscription ends with a ``browser: end`` frame). Every
failure surfaces as :class:`JmsConnectionError`; the connection is then dead and is thrown away.
The inbox is bounded by the subscriptions' ``activemq.prefetchSize``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlparse

import stomp
from stomp.exception import StompException

from .errors import JmsConnectionError

log = logging.getLogger(__name__)
_counter = itertools.count(1)
# STOMP 1.2 header escaping (what stomp.py's Protocol12 does to the values of every frame but CONNECT).
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", ":": "\\c"})
SEND_MANY_CHUNK = 64 * 1024   # bytes of packed SEND frames handed to the transport at once


@functools.lru_cache(maxsize=256)    # a transaction's frames go to a few destinations
def _send_head(destination: str, transaction: str) -> str:
    return f"SEND\ndestination:{destination.translate(_ESCAPES)}\ntransaction:{transaction.translate(_ESCAPES)}\n"


def encode_send(destination: str, body: bytes, headers: dict[str, str], transaction: str) -> bytes:
    """One STOMP 1.2 SEND frame in ``transaction``: escaped headers, the body, the NUL.

    A body holding a NUL byte always gets a ``content-length`` (its true length), else the NUL
    would end the frame early and the rest would be read as garbage frames.
    """
    head = _send_head(destination, transaction)
    # The usual frame, in C: every line holds one ':' and ends with '\n', and nothing else does,
    # so no name or value needs escaping (translate costs a dict look-up per character).
    block = "\n".join(map(":".join, headers.items()))
    length = headers.get("content-length")
    if (block.count(":") == len(headers) and block.count("\n") == len(headers) - 1 and "\\" not in block
            and "\r" not in block and "destination" not in headers and "transaction" not in headers
            and (length == str(len(body)) if length is not None else b"\x00" not in body)):
        return b"".join(((head + block + "\n\n").encode(), body, b"\x00"))
    lines = [head]
    for name, value in headers.items():
        if name in ("content-length", "destination", "transaction"):
            continue
        lines.append(f"{name.translate(_ESCAPES)}:{value.translate(_ESCAPES)}\n")
    if length is not None or b"\x00" in body:
        lines.append(f"content-length:{len(body)}\n")
    lines.append("\n")
    return b"".join(("".join(lines).encode(), body, b"\x00"))


@dataclass(slots=True)
class Frame:
    """A MESSAGE frame: headers and raw body bytes."""

    headers: dict[str, str]
    body: bytes


def parse_url(url: str) -> tuple[str, int]:
    """``stomp://host:port`` (or ``host:port``) as a (host, port) pair."""
    parsed = urlparse(url if "://" in url else f"stomp://{url}")
    if parsed.scheme not in ("stomp", "tcp", "stomp+ssl", "ssl") or not parsed.hostname:
        raise ValueError(f"not a STOMP URL: {url!r} (expected stomp://host:port or stomp+ssl://host:port)")
    return parsed.hostname, parsed.port or 61613


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, owner: StompClient) -> None:
        self.owner = owner

    def on_connected(self, frame: stomp.utils.Frame) -> None:
        with self.owner.lock:
            self.owner.alive = True
            self.owner.changed.notify_all()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        body = frame.body if isinstance(frame.body, bytes) else str(frame.body).encode("utf-8")
        self.owner.inbox.put(Frame(dict(frame.headers), body))

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        with self.owner.lock:
            self.owner.receipts.add(frame.headers.get("receipt-id", ""))
            self.owner.changed.notify_all()

    def on_error(self, frame: stomp.utils.Frame) -> None:
        message = frame.headers.get("message", "")
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
        log.warning("STOMP ERROR frame: %s %s", message, body[:300])
        with self.owner.lock:
            self.owner.error = f"{message} {body[:300]}".strip()
            self.owner.changed.notify_all()

    def on_heartbeat_timeout(self) -> None:
        log.warning("no STOMP heart-beat from %s in time: the connection is lost", self.owner.url)
        with self.owner.lock:
            self.owner.error = "heart-beat timeout"
            self.owner.changed.notify_all()
        self.owner.inbox.put(None)

    def on_disconnected(self) -> None:
        with self.owner.lock:
            self.owner.alive = False
            self.owner.changed.notify_all()
        self.owner.inbox.put(None)    # wakes a receive() waiting on a dead connection


class StompClient:
    """One connection to ActiveMQ's STOMP connector."""

    def __init__(self, url: str, *, client_id: str | None = None, user: str | None = None,
                 password: str | None = None, timeout: float = 10.0, vhost: str | None = None,
                 heartbeat_ms: int = 0, ssl: bool | None = None, ssl_ca_file: str | None = None,
                 ssl_cert_file: str | None = None, ssl_key_file: str | None = None) -> None:
        """``ssl`` defaults to what the URL says (``stomp+ssl://``); the server's certificate is
        verified against ``ssl_ca_file`` (else the system's CAs), host name included. ``vhost`` is
        the CONNECT frame's ``host`` header (default: the host). ``heartbeat_ms`` > 0 asks for
        heart-beats both ways; a server silent for 1.5 times the agreed period is a lost connection."""
        self.url = url
        self.host, self.port = parse_url(url)
        self.client_id = client_id
        self.user, self.password = user, password
        self.timeout = timeout
        self.vhost = vhost
        self.heartbeat_ms = heartbeat_ms
        self.ssl = url.startswith(("stomp+ssl:", "ssl:")) if ssl is None else ssl
        self.ssl_files = (ssl_ca_file, ssl_cert_file, ssl_key_file)
        self.inbox: queue.Queue[Frame | None] = queue.Queue()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.receipts: set[str] = set()
        self.error: str | None = None
        self.alive = False
        self.conn: stomp.Connection12 | None = None

    def connect(self) -> StompClient:
        """Connect (CONNECTED frame received), or raise :class:`JmsConnectionError`."""
        conn = stomp.Connection12([(self.host, self.port)], auto_decode=False, auto_content_length=False,
                                  reconnect_attempts_max=1, timeout=self.timeout,
                                  heartbeats=(self.heartbeat_ms, self.heartbeat_ms), vhost=self.vhost)
        if self.ssl:
            ca, cert, key = self.ssl_files
            conn.set_ssl(for_hosts=[(self.host, self.port)], ca_certs=ca, cert_file=cert, key_file=key)
        conn.set_listener("toymb", _Listener(self))
        headers = {"client-id": self.client_id} if self.client_id else {}
        hint = " (TLS: is it a stomp+ssl port, and does the CA file sign its certificate?)" if self.ssl else ""
        try:
            # Not stomp.py's wait=True: its wait for CONNECTED has no deadline.
            conn.connect(self.user, self.password, wait=False, headers=headers)
        except (StompException, OSError) as exc:
            self._drop(conn)
            raise JmsConnectionError(f"cannot connect to {self.url}: {exc or type(exc).__name__}{hint}") from None
        deadline = time.monotonic() + self.timeout
        with self.lock:
            while not self.alive and self.error is None and conn.transport.running:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(min(left, 0.1))
            alive, error, running = self.alive, self.error, conn.transport.running
        if not alive:
            self._drop(conn)
            why = error or (f"no CONNECTED frame within {self.timeout:g} s" if running
                            else "the server closed the connection before CONNECTED")
            raise JmsConnectionError(f"cannot connect to {self.url}: {why}{hint}")
        self.conn = conn
        return self

    @staticmethod
    def _drop(conn: stomp.Connection12) -> None:
        try:
            conn.disconnect()
        except Exception:  # noqa: BLE001 - already broken
            pass
        try:
            # Close the socket ourselves: waiting for the server to close it after DISCONNECT would
            # hang forever on a server that stopped answering (what heart-beats detect).
            conn.transport.disconnect_socket()
        except Exception:  # noqa: BLE001
            pass
        try:
            conn.transport.stop()
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        """Disconnect; never raises. Uncommitted transactions and unacked messages go back to ActiveMQ."""
        if self.conn is not None:
            self._drop(self.conn)
            self.conn = None
        self.alive = False

    def check(self) -> None:
        """Raise :class:`JmsConnectionError` if the connection is dead."""
        self._check()

    def _check(self) -> stomp.Connection12:
        if self.conn is None or not self.alive or self.error:
            raise JmsConnectionError(
                f"connection to {self.url} lost" + (f": {self.error}" if self.error else "")
            )
        return self.conn

    def _call(self, what: str, fn: object, *args: object, **kwargs: object) -> None:
        self._check()
        try:
            fn(*args, **kwargs)  # type: ignore[operator]
        except (StompException, OSError) as exc:
            self.alive = False
            raise JmsConnectionError(f"{what} to {self.url} failed: {exc or type(exc).__name__}") from None

    def wait_receipt(self, receipt: str, timeout: float | None = None) -> None:
        """Block until ActiveMQ confirmed the frame sent with ``receipt``; raise
        :class:`JmsConnectionError` if it answered any frame with an ERROR first."""
        deadline = time.monotonic() + (timeout or self.timeout)
        with self.lock:
            while receipt not in self.receipts:
                if not self.alive or self.error:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            if receipt in self.receipts and not self.error:
                self.receipts.discard(receipt)
                return
        # An ERROR frame before the receipt: ActiveMQ refused an earlier frame (it may keep the
        # connection open after that): nothing sent since the last receipt can be trusted.
        self.alive = False
        raise JmsConnectionError(
            f"no receipt {receipt} from {self.url}" + (f": {self.error}" if self.error else "")
        )

    def new_receipt(self) -> str:
        return f"r-{next(_counter)}"

    def send(self, destination: str, body: bytes, headers: dict[str, str], transaction: str | None = None,
             receipt: bool = False) -> None:
        conn = self._check()
        hdrs = dict(headers)
        if transaction:
            hdrs["transaction"] = transaction
        rid = self.new_receipt() if receipt else None
        if rid:
            hdrs["receipt"] = rid
        self._call("SEND", conn.send, destination, body, headers=hdrs)
        if rid:
            self.wait_receipt(rid)

    def send_many(self, frames: Iterable[tuple[str, bytes, dict[str, str]]], transaction: str) -> int:
        """SEND each (destination, body, headers) in ``transaction``, packed into few writes.

        The same frames as :meth:`send`'s, without stomp.py's per-frame encoding, listener calls
        and system call (the egress sends thousands per transaction). They go on the wire the way
        stomp.py's own frames go (:meth:`_write`), so after the BEGIN and before the COMMIT sent
        through stomp.py. Returns how many were sent.
        """
        conn = self._check()
        chunk: list[bytes] = []
        size = count = 0
        for destination, body, headers in frames:
            frame = encode_send(destination, body, headers, transaction)
            chunk.append(frame)
            size += len(frame)
            count += 1
            if size >= SEND_MANY_CHUNK:
                self._call("SEND", self._write, conn, b"".join(chunk))
                chunk, size = [], 0
        if chunk:
            self._call("SEND", self._write, conn, b"".join(chunk))
        return count

    @staticmethod
    def _write(conn: stomp.Connection12, data: bytes) -> None:
        """Write encoded frames the way stomp.py's ``transmit`` writes its own.

        On a plain socket stomp.py writes from the caller's thread under the transport's socket
        lock (``transport.send``). On a TLS socket it does not: the socket is non-blocking and only
        the transport's I/O thread writes, taking frames off ``send_queue`` in order. Writing there
        from this thread instead raced the I/O thread: a SEND could reach ActiveMQ before the
        BEGIN still queued ("Invalid transaction id"), or interleave with it inside the TLS stream.
        """
        transport = conn.transport
        if transport.blocking:
            transport.send(data)
            return
        outgoing = transport.send_queue
        if outgoing is None:            # shut down by a disconnect meanwhile
            raise OSError("the connection is closed")
        outgoing.put(data)

    def begin(self, transaction: str) -> None:
        self._call("BEGIN", self._check().begin, transaction)

    def commit(self, transaction: str) -> None:
        """COMMIT and wait for its receipt: when this returns, the transaction is durable."""
        rid = self.new_receipt()
        self._call("COMMIT", self._check().commit, transaction, headers={"receipt": rid})
        self.wait_receipt(rid)

    def abort(self, transaction: str) -> None:
        self._call("ABORT", self._check().abort, transaction)

    def subscribe(self, destination: str, sub_id: str, ack: str = "client-individual",
                  headers: dict[str, str] | None = None) -> None:
        """SUBSCRIBE, confirmed by a receipt (so a bad selector fails here, not later)."""
        rid = self.new_receipt()
        hdrs = dict(headers or {})
        hdrs["receipt"] = rid
        self._call("SUBSCRIBE", self._check().subscribe, destination, sub_id, ack=ack, headers=hdrs)
        self.wait_receipt(rid)

    def unsubscribe(self, sub_id: str, headers: dict[str, str] | None = None) -> None:
        rid = self.new_receipt()
        hdrs = dict(headers or {})
        hdrs["receipt"] = rid
        self._call("UNSUBSCRIBE", self._check().unsubscribe, sub_id, headers=hdrs)
        self.wait_receipt(rid)

    def ack(self, ack_id: str, transaction: str | None = None, wait: bool = False) -> None:
        conn = self._check()
        rid = self.new_receipt() if wait else None
        self._call("ACK", conn.ack, ack_id, transaction=transaction, receipt=rid)
        if rid:
            self.wait_receipt(rid)

    def receive(self, timeout: float) -> Frame | None:
        """The next MESSAGE frame, or None after ``timeout`` seconds; raises if the connection died."""
        try:
            frame = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            self._check()
            return None
        if frame is None:
            self._check()
            return None
        return frame

    def browse(self, destination: str, timeout: float | None = None) -> list[Frame]:
        """Every message now in a queue, without consuming it (ends at ActiveMQ's ``browser: end``).

        Only for small queues (the egress marker queue holds one message); frames of other
        subscriptions arriving meanwhile are put back in the inbox.
        """
        sub = f"browse-{next(_counter)}"
        self.subscribe(destination, sub, ack="auto", headers={"browser": "true"})
        found: list[Frame] = []
        others: list[Frame] = []
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while True:
                frame = self.receive(deadline - time.monotonic())
                if frame is None:
                    if time.monotonic() >= deadline:
                        raise JmsConnectionError(f"browsing {destination} did not end within the timeout")
                    continue
                if frame.headers.get("subscription") != sub:
                    others.append(frame)
                elif frame.headers.get("browser") == "end":
                    return found
                else:
                    found.append(frame)
        finally:
            for frame in others:
                self.inbox.put(frame)
            if self.alive:
                self.unsubscribe(sub)
