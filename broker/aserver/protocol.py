"""One HTTP/1.1 connection: parsed by llhttp (httptools), its requests answered strictly in order.

Requests pipelined on a connection are parsed as they arrive but served one at a time, in order:
the next starts once the previous answer is handed to the transport, so a publish and a read
behind it see each other as a client expects. Reading pauses while a request waits behind
another, so a pipelining client cannot queue more than one read's worth of requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import httptools

from .framing import MAX_HEADER_BYTES, MAX_HEADERS, Refusal, read_framing, response_head, server_fault, too_large
from .request import Request, base_environ
from .wsgi import InlineReply, Outlet

if TYPE_CHECKING:

    from .server import Server

log = logging.getLogger(__name__)

# The transport's outgoing buffer above which a worker sending an answer waits for the client.
WRITE_HIGH = 256 * 1024
# After a refusal the connection is half-closed and read (discarding) this long at most, so the
# client reads the answer rather than a reset from unread bytes.
LINGER_S = 2.0
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connection(asyncio.Protocol):
    """An accepted connection; see the module's docstring."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = server.event_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.peer: tuple[str, int] = ("", 0)
        self.parsing: Request | None = None            # the request being received
        self.waiting: deque[Request | Refusal] = deque()  # received, answered in this order
        self.serving = False          # waiting[0] is being answered
        self.broken = False           # after a refusal: no more requests are read from this stream
        self.closed = False
        self.peer_done = False        # the client half-closed: no more requests will come
        self.reading = True
        self.head_bytes = 0           # bytes received since the current request began, until its headers end
        self.failure: Refusal | None = None
        self.body_left = 0            # body bytes read here, not by llhttp (see _ignore_upgrade)
        self.last_activity = time.monotonic()
        self.buffered = 0             # the transport's outgoing buffer at the last sweep (progress)
        self.outlet = Outlet(self)
        self.base_environ: dict[str, Any] = {}   # what every request's environ holds (connection_made)

    # --- asyncio's callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = (str(peer[0]), int(peer[1]))
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        server = self.server
        self.base_environ = base_environ(self.peer, server.server_name, server.port_text, server.ident)
        if not self.server.admit(self):
            self.closed = True
            transport.write(self.server.busy_refusal())
            transport.close()

    def data_received(self, data: bytes) -> None:
        before, self.last_activity = self.last_activity, time.monotonic()
        if self.broken or self.closed:
            return   # lingering after a refusal: read and dropped
        while data:
            data = self._take_body(data) if self.body_left else self._parse(data)
        if self.parsing is None and not self.waiting and not self.broken:
            # Only blank lines, which llhttp skips before a request: not activity, or a client
            # dripping CRLFs would hold the connection with neither timeout ever running.
            self.last_activity = before
        if len(self.waiting) > 1 and self.reading and not self.broken:
            self.reading = False
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._serve_next()

    def _parse(self, data: bytes) -> bytes:
        """Feed ``data`` to llhttp; what is left when it stopped at an ``Upgrade`` it was told to ignore."""
        if self.parsing is None or not self.parsing.headers_done:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except Refusal as refusal:
            self._refuse(refusal)
        except httptools.HttpParserCallbackError:
            self._refuse(self.failure or Refusal(400, "Bad Request: the request could not be read"))
        except httptools.HttpParserUpgrade as upgrade:
            return self._ignore_upgrade(data[upgrade.args[0]:])
        except httptools.HttpParserError as exc:
            self._refuse(Refusal(400, f"Bad Request: {exc}"))
        else:
            if self.parsing is not None and not self.parsing.headers_done and self.head_bytes > MAX_HEADER_BYTES:
                self._refuse(Refusal(431, f"Request Header Fields Too Large: over {MAX_HEADER_BYTES} bytes"))
        return b""

    def _ignore_upgrade(self, rest: bytes) -> bytes:
        """Serve a request that asked for another protocol (Java's HttpClient asks for h2c on every
        request) as plain HTTP/1.1, as waitress did: llhttp stopped at its headers, so its body is
        read here, and a new parser takes the requests after it."""
        self.parser = httptools.HttpRequestParser(self)
        request = self.waiting[-1] if self.waiting else None
        if not isinstance(request, Request) or self.parsing is not None or request.method == "CONNECT":
            self.broken = True   # a tunnel is not served: answer what came before, then close
            if isinstance(request, Request):
                request.keep_alive = False
            return b""
        if request.chunked:
            self._refuse(Refusal(400, "Bad Request: a request asking for an Upgrade may not have a chunked body"))
            return b""
        if request.length:
            self.waiting.pop()
            self.parsing, self.body_left = request, request.length
        return rest

    def _take_body(self, data: bytes) -> bytes:
        """Read the body of a request whose Upgrade was ignored; the rest of ``data`` is after it."""
        request = self.parsing
        assert request is not None
        piece = data[:self.body_left]
        request.add_body(piece, self.server.max_request)   # within the limit: its length was checked
        self.body_left -= len(piece)
        if not self.body_left:
            self.waiting.append(request)
            self.parsing = None
            self.head_bytes = 0
        return data[len(piece):]

    def eof_received(self) -> bool:
        self.peer_done = True
        return bool(self.waiting) or self.serving   # keep the half-open connection to send answers

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.outlet.close()
        self.server.forget(self)
        for item in self.waiting:
            if isinstance(item, Request):
                item.close()
        if self.parsing is not None:
            self.parsing.close()

    def pause_writing(self) -> None:
        self.outlet.set_paused(True)

    def resume_writing(self) -> None:
        self.outlet.set_paused(False)

    # --- llhttp's callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.parsing = Request(time.monotonic())

    def on_url(self, url: bytes) -> None:
        assert self.parsing is not None
        self.parsing.url_parts.append(url)
        self.parsing.head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.parsing
        assert request is not None
        request.headers.append((name, value))
        request.head_bytes += len(name) + len(value) + 4
        if len(request.headers) > MAX_HEADERS:
            self._fail(Refusal(431, f"Request Header Fields Too Large: over {MAX_HEADERS} headers"))

    def on_headers_complete(self) -> None:
        request = self.parsing
        assert request is not None
        request.headers_done = True
        request.url = request.url_parts[0] if len(request.url_parts) == 1 else b"".join(request.url_parts)
        self.head_bytes = 0
        request.version = self.parser.get_http_version()
        request.method = self.parser.get_method().decode("latin-1")
        request.keep_alive = self.parser.should_keep_alive()
        if request.head_bytes > MAX_HEADER_BYTES:
            self._fail(Refusal(431, f"Request Header Fields Too Large: over {MAX_HEADER_BYTES} bytes"))
        framing = read_framing(request.headers, request.version)
        if framing.problem is not None:
            self._fail(Refusal(400, f"Bad Request: {framing.problem}"))
        if framing.length is not None and framing.length > self.server.max_request:
            self._fail(too_large(self.server.max_request))   # from the header alone: the body is never read
        request.chunked = framing.chunked
        request.length = framing.length
        # As waitress: a client waiting for it may send the body now. Not while an earlier answer
        # is still to come, which the 100 would precede.
        if framing.expect_continue and not self.waiting and not self.serving and self.transport is not None:
            self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        assert self.parsing is not None
        try:
            self.parsing.add_body(body, self.server.max_request)
        except Refusal as refusal:
            self._fail(refusal)

    def on_message_complete(self) -> None:
        assert self.parsing is not None
        self.waiting.append(self.parsing)
        self.parsing = None
        self.head_bytes = 0

    # --- answering -------------------------------------------------------------------------------

    def _fail(self, refusal: Refusal) -> None:
        self.failure = refusal
        raise refusal   # stops llhttp; data_received answers it

    def _refuse(self, refusal: Refusal) -> None:
        """Answer ``refusal`` after the requests already received, then close: the stream is lost."""
        self.broken = True
        if self.parsing is not None:
            self.parsing.close()
            self.parsing = None
        self.waiting.append(refusal)

    def _serve_next(self) -> None:
        if self.serving or not self.waiting or self.closed or self.transport is None:
            return
        item = self.waiting[0]
        self.serving = True
        if isinstance(item, Request):
            try:
                environ = item.environ(self.base_environ)
            except Refusal as refusal:
                item.close()
                self.waiting[0] = item = refusal
        if isinstance(item, Refusal):
            self.transport.write(item.answer(self.server.ident))
            self.waiting.clear()
            self._linger()
            return
        inline = self.server.inline
        if inline is not None and self.server.inline_on_loop:
            try:
                if inline(environ, InlineReply(self, item)):
                    return
            except Exception:   # a fault of the handler is a JSON 500, not a hung connection
                log.exception("the inline handler failed on %s %s", item.method, item.url[:200])
                item.close()
                self.waiting[0] = server_fault()
                self.serving = False
                self._serve_next()
                return
        self.server.hand_over(self, item, environ)

    def refuse_inline(self, request: Request, refusal: Refusal) -> None:
        """Answer a request the inline handler took with ``refusal``, then close (the loop's thread)."""
        request.keep_alive = False
        self._write(refusal.answer(self.server.ident), request)

    def send_inline(self, request: Request, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        close = not request.keep_alive or self.server.draining
        request.keep_alive = not close
        connection = "close" if close else ("Keep-Alive" if request.version == "1.0" else None)
        self._write(response_head(request.version, status, headers, self.server.ident, connection) + body, request)

    def write_queued(self, data: bytes) -> None:
        """Send a piece of an answer a worker handed over (the loop's thread)."""
        self.outlet.written(len(data))
        self._write(data, None)

    def write_last(self, data: bytes, request: Request) -> None:
        """Send the last piece of ``request``'s answer, which a worker handed over (the loop's thread)."""
        self._write(data, request)

    def _write(self, data: bytes, request: Request | None) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(data)
        self.last_activity = time.monotonic()
        if request is not None:
            self._answered(request)

    def _answered(self, request: Request) -> None:
        request.close()
        if self.waiting and self.waiting[0] is request:
            self.waiting.popleft()
        self.serving = False
        if not request.keep_alive or self.server.draining or (self.peer_done and not self.waiting):
            self.close()
            return
        if not self.reading and len(self.waiting) <= 1:
            self.reading = True
            self.transport.resume_reading()  # type: ignore[union-attr]
        self._serve_next()

    def _linger(self) -> None:
        """After a refusal: the answer, then end of stream; the rest the client sends is dropped."""
        assert self.transport is not None
        if not self.reading:
            self.reading = True
            self.transport.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.close)

    # --- the server's sweeps ---------------------------------------------------------------------

    def busy(self) -> bool:
        """A request is being served or waits, or an answer is still being sent: never closed for being idle."""
        return bool(self.waiting) or (self.transport is not None and self.transport.get_write_buffer_size() > 0)

    def evictable(self) -> bool:
        """Nothing in progress that a client would miss: idle, or still sending its headers."""
        return not self.busy() and (self.parsing is None or not self.parsing.headers_done)

    def track_progress(self, now: float) -> None:
        """Count a change of the outgoing buffer since the last sweep as activity (a client reading)."""
        if self.transport is not None:
            size = self.transport.get_write_buffer_size()
            if size != self.buffered:
                self.buffered = size
                self.last_activity = now

    def overdue(self, header_cutoff: float, idle_cutoff: float) -> bool:
        """Whether an idle connection's timeout passed: headers begun before ``header_cutoff``
        and still not whole (slowloris), or no activity since ``idle_cutoff``."""
        if self.busy():
            return False
        request = self.parsing
        if request is not None and not request.headers_done and request.started < header_cutoff:
            return True
        return self.last_activity < idle_cutoff

    def close(self) -> None:
        """Close once what is queued for the client is sent (until then it stays in the server's table)."""
        if self.closed or self.transport is None:
            return
        self.closed = True
        self.outlet.close()
        self.transport.close()
        if self.transport.get_write_buffer_size() == 0:
            self.server.forget(self)   # gone at once: its place is free for a newcomer

    def abort(self) -> None:
        """Close now, dropping whatever is not sent."""
        self.closed = True
        self.outlet.close()
        if self.transport is not None:
            self.transport.abort()
        self.server.forget(self)

