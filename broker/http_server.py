"""A hardened waitress server: a connection cap that never freezes the node, timeouts, strict framing, JSON errors.

Stock waitress, as a node used it, had four weaknesses an outside attack found (issue 13):

* At ``connection_limit`` it stops accepting, so a few hundred idle sockets froze the node
  (``/health`` timed out). Here the node always accepts: at ``max_connections`` it closes the
  least recently active connection that has nothing in progress, and if every connection is
  busy it answers the newcomer with a JSON 503 and closes it.
* ``select()`` cannot watch more than 1024 descriptors; the loop uses ``poll()``.
* Only a whole-connection inactivity timeout existed, which a client resets with every byte, so
  a header drip-fed a byte at a time (slowloris) held a connection forever. Here a request's
  headers must be complete ``header_timeout`` after its first byte; a connection with no request
  in progress is closed after ``idle_timeout``. A request being served (a long poll) is never cut.
* Errors waitress itself produced (bad framing, oversized header or body) were plain text, and a
  request with both ``Transfer-Encoding: chunked`` and ``Content-Length`` was accepted (the
  length ignored), a request-smuggling vector behind a proxy that reads the length. Here those
  are JSON like the app's errors, and ambiguous framing is a 400 that closes the connection.
* ``close()`` stopped accepting but left open connections in the loop, and nothing swept them any
  more: a client (a peer node's forwarder) holding a keep-alive connection kept a node that was
  told to stop running until it hung up. :meth:`HardenedServer.drain` stops accepting, closes
  idle connections at once and each busy one when its answer is sent. It cuts a connection whose
  answer makes no progress for ``stall_timeout`` (a client that stopped reading), and whatever is
  still open after ``drain_timeout``: a large answer to a slow but reading client is sent whole.

The overrides are small and lean on waitress 3.0 internals (``server.py``, ``channel.py``,
``parser.py``, ``task.py``); each says why it exists.
"""

from __future__ import annotations

import functools
import json
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import ClientDisconnected, HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError, get_header_lines
from waitress.rfc7230 import HEADER_FIELD_RE
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask
from waitress.utilities import build_http_date

from .errors import ConfigError

log = logging.getLogger(__name__)

# A handler of requests served without a worker thread: (environ, respond) -> taken. ``respond``
# takes (status line, headers, body) and may be called from any thread.
InlineHandler = Callable[[dict[str, Any], Callable[[str, list[tuple[str, str]], bytes], None]], bool]

# Descriptors a node needs besides its HTTP connections: listening socket, trigger pipe, log,
# SQLite files or PostgreSQL pool, outgoing push and forward connections, spooled bodies.
FD_RESERVE = 256
# Bytes read from a connection at a time (waitress: 8 KiB); see HardenedServer.
RECV_BYTES = 64 * 1024
# The ``error`` field of each status waitress answers itself, as the app names them.
_CODES = {400: "bad_request", 413: "payload_too_large", 431: "request_header_fields_too_large",
          500: "internal_error", 501: "not_implemented"}

# A Content-Length longer than this is refused before waitress converts it to an int.
MAX_LENGTH_DIGITS = 18


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """The JSON body of an error, the same shape as the app's (``broker.errors.BrokerError.to_json``)."""
    return json.dumps({"error": code, "message": message, **extra}).encode()


def framing_error(header_plus: bytes) -> str | None:
    """Why a request's framing is ambiguous, or None.

    waitress lets ``Transfer-Encoding: chunked`` win over a ``Content-Length`` and ignores
    ``Transfer-Encoding`` on HTTP/1.0; a proxy in front may read the same bytes the other way, and
    the rest of the body becomes a second, smuggled request. So the length must have exactly one
    source: one ``Content-Length``, or one ``Transfer-Encoding`` that is exactly ``chunked`` on HTTP/1.1.
    """
    first_line, _, header = header_plus.partition(b"\r\n")
    lengths: list[bytes] = []
    encodings: list[bytes] = []
    for line in get_header_lines(header):  # raises ParsingError as waitress itself would
        field = HEADER_FIELD_RE.match(line)
        if field is None:
            continue  # waitress refuses the malformed line right after
        name = field.group("name").lower()
        if name == b"content-length":
            lengths.append(field.group("value").strip(b" \t"))
        elif name == b"transfer-encoding":
            encodings.append(field.group("value").strip(b" \t"))
    if lengths and encodings:
        return "a request may not have both Transfer-Encoding and Content-Length"
    if len(lengths) > 1:
        return "a request may have only one Content-Length"
    if lengths and len(lengths[0]) > MAX_LENGTH_DIGITS:
        # waitress's int() raises ValueError past 4,300 digits, which it does not catch: the
        # connection closed with no answer. No body this node accepts needs more digits than this.
        return f"Content-Length has more than {MAX_LENGTH_DIGITS} digits"
    if encodings:
        if len(encodings) > 1 or encodings[0].lower() != b"chunked":
            return "Transfer-Encoding must be exactly chunked"
        if not first_line.rstrip().endswith(b" HTTP/1.1"):
            return "Transfer-Encoding needs HTTP/1.1"
    return None


class StrictParser(HTTPRequestParser):  # type: ignore[misc]
    """waitress's parser, refusing ambiguous framing and remembering when the request's first byte came."""

    started: float | None = None  # time.time() of the first byte; the header timeout counts from it

    def received(self, data: bytes) -> int:
        if self.started is None and data:
            self.started = time.time()
        return int(super().received(data))

    def parse_header(self, header_plus: bytes) -> None:
        problem = framing_error(header_plus)
        if problem is not None:
            raise ParsingError(problem)  # becomes a 400 and closes the connection
        super().parse_header(header_plus)


class JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """An error waitress answers itself (before the app runs), as JSON instead of plain text."""

    def execute(self) -> None:
        error = self.request.error
        status = int(error.code)
        code = _CODES.get(status, "error")
        if status == 413:
            limit = self.channel.server.max_request
            body = error_body(code, f"the request body is over {limit} bytes (TOYMB_MAX_REQUEST)",
                              limit="request", max=limit)
        elif status >= 500:
            body = error_body(code, "the server could not answer this request; see the node's log")
        else:
            body = error_body(code, f"{error.reason}: {error.body}")
        self.status = f"{status} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()  # the stream may be out of step with the framing: never reuse it
        self.content_length = len(body)
        self.write(body)


class HardenedChannel(HTTPChannel):  # type: ignore[misc]
    parser_class = StrictParser
    error_task_class = JsonErrorTask
    current_outbuf_count: int   # waitress's: bytes written to the connection's newest output buffer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Reentrant: an inline answer can be ready at once (a refused body, or a commit that ended
        # before its callback was added) and is then sent from within received(), which holds it.
        self.requests_lock = threading.RLock()

    def try_inline(self, handler: InlineHandler) -> bool:
        """Offer the connection's first request to ``handler`` on the loop's thread; False to give
        it to a worker thread as usual.

        Offered only a keep-alive HTTP/1.1 request with a plain body, so the answer's framing is
        the app's own. The request stays first in ``requests`` until it is answered: the
        connection counts as busy (never closed for being idle), and requests pipelined behind it
        wait their turn, as behind a worker.
        """
        request = self.requests[0]
        if (request.error or request.version != "1.1" or request.chunked or request.expect_continue
                or request.headers.get("CONNECTION", "").lower() == "close"):
            return False
        environ = self.task_class(self, request).get_environment()
        return handler(environ, functools.partial(self._answer_inline, request))

    def _answer_inline(self, request: Any, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        """Send an inline request's answer (any thread), then hand the next request to a worker."""
        head = "".join(f"{name}: {value}\r\n" for name, value in headers)
        server = f"Server: {self.adj.ident}\r\n" if self.adj.ident else ""  # as waitress's own answers
        head = f"HTTP/1.1 {status}\r\n{head}{server}Date: {build_http_date(time.time())}\r\n\r\n"
        try:
            self.write_soon(head.encode("latin-1") + body)
        except ClientDisconnected:
            pass
        with self.outbuf_lock:
            # As waitress's service() does after each answer: the next answer starts a new output
            # buffer. A buffer is only emptied by being closed, so one shared by every answer of a
            # keep-alive connection grew by each answer over 8 KiB, up to 16 MiB per connection.
            if self.current_outbuf_count > 0:
                self.current_outbuf_count = self.adj.outbuf_high_watermark
        request.close()
        with self.requests_lock:
            if self.requests and self.requests[0] is request:
                self.requests.pop(0)
            more = self.connected and bool(self.requests)
        if more:
            self.server.add_task(self)
        self.server.wake_loop()

    def busy(self) -> bool:
        """A request is being served or its answer is still being sent: never closed for being idle."""
        return bool(self.requests) or bool(self.total_outbufs_len)

    def evictable(self) -> bool:
        """Nothing in progress that a client would miss: idle, or still sending its headers."""
        request = self.request
        return not self.busy() and (request is None or not request.headers_finished)


class HardenedServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server with the connection cap, timeouts and JSON errors described above."""

    channel_class = HardenedChannel
    # Takes some requests without a worker thread (the publish fast path); set before run().
    inline: InlineHandler | None = None
    loop_thread: int | None = None
    loop_woken = False  # the trigger was pulled since the loop's pass began
    next_channel_cleanup: float = 0.0
    drain_deadline: float | None = None   # set by drain(): the loop then ends when every connection is closed
    drain_started = 0.0                   # time.time() of drain(), the clock of waitress's last_activity
    drain_stall = 0.0

    def __init__(self, application: Any, *, max_connections: int, idle_timeout: float, header_timeout: float,
                 max_request: int, **adjustments: Any) -> None:
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.max_request = max_request
        # Sweep often enough that a timeout is late by at most about half of itself (and 1 s).
        self.sweep_interval = min(1.0, idle_timeout / 2, header_timeout / 2)
        self.evicted = self.refused = 0
        self.next_report = 0.0
        adjustments.update(
            asyncore_use_poll=True,  # select() fails past descriptor 1024
            # waitress refuses a body over this before reading it, so it never spools more than the app accepts.
            max_request_body_size=max_request + 1,
            connection_limit=max_connections,  # not enforced by waitress any more (see readable), kept for clarity
            # One read takes a whole batch of a hundred messages (about 30 KB), where waitress's 8 KiB
            # took four, each a pass of the loop and of the parser.
            recv_bytes=RECV_BYTES,
        )
        super().__init__(application, map={}, adj=Adjustments(**adjustments))

    def wake_loop(self) -> None:
        """Wake the loop to send queued answers: once per pass however many are queued (a commit
        answers many inline publishes at once, and each wake costs a pass over every connection)."""
        if not self.loop_woken:
            self.loop_woken = True
            self.pull_trigger()

    def add_task(self, channel: HardenedChannel) -> None:
        # A request the inline handler takes needs no worker thread (see HardenedChannel.try_inline);
        # only on the loop's own thread, so that what it parses never waits behind a worker.
        if self.inline is not None and threading.get_ident() == self.loop_thread and channel.try_inline(self.inline):
            return
        super().add_task(channel)

    def drain(self, stall_timeout: float, drain_timeout: float) -> None:
        """Stop accepting and let :meth:`run` return once in-flight answers are sent.

        A connection that neither sends nor receives a byte for ``stall_timeout`` s after the call
        is cut, and so is every connection still open ``drain_timeout`` s after it. Call it from
        the loop's thread (a signal handler of the main thread is).
        """
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + drain_timeout
            self.drain_started, self.drain_stall = time.time(), stall_timeout
            self.close()   # the listening socket and the trigger leave the loop

    def run(self) -> None:
        # waitress's loop runs while its map has entries, and after close() nothing sweeps them:
        # step it here, closing connections as they fall idle once draining.
        timeout = self.adj.asyncore_loop_timeout
        self.loop_thread = threading.get_ident()
        try:
            while self._map:
                if self.drain_deadline is not None:
                    timeout = 0.05
                    cut_all = time.monotonic() >= self.drain_deadline
                    stalled_before = time.time() - self.drain_stall
                    for channel in list(self.active_channels.values()):
                        last = max(channel.last_activity, self.drain_started)
                        if cut_all or not channel.busy() or last < stalled_before:
                            channel.handle_close()
                # Cleared before the loop looks at what is writable: an answer queued after this
                # is either seen by this pass or wakes the loop again (wake_loop).
                self.loop_woken = False
                self.asyncore.loop(timeout=timeout, map=self._map, use_poll=True, count=1)
        except (SystemExit, KeyboardInterrupt):
            self.task_dispatcher.shutdown()

    def readable(self) -> bool:
        # waitress stops accepting at its connection limit, which is what froze the node; here
        # accepting never stops and handle_accept makes room. The sweep replaces waitress's.
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.sweep_interval
            self.maintenance(now)
        return bool(self.accepting)

    def maintenance(self, now: float) -> None:
        idle_cutoff = now - self.idle_timeout
        header_cutoff = now - self.header_timeout
        for channel in list(self.active_channels.values()):
            if channel.busy():
                continue
            request = channel.request
            if request is not None and not request.headers_finished and (request.started or now) < header_cutoff:
                channel.will_close = True  # slowloris: headers drip-fed past the header timeout
            elif channel.last_activity < idle_cutoff:
                channel.will_close = True
        if (self.evicted or self.refused) and now >= self.next_report:
            log.warning("at max_connections=%d: closed %d idle connections, refused %d new ones",
                        self.max_connections, self.evicted, self.refused)
            self.evicted = self.refused = 0
            self.next_report = now + 10

    def handle_accept(self) -> None:
        # waitress's handle_accept, with room made (or the newcomer refused) at the cap.
        try:
            pair = self.accept()
            if pair is None:
                return
            conn, addr = pair
            self.set_socket_options(conn)
        except OSError:
            log.warning("accept() failed", exc_info=True)
            return
        if len(self.active_channels) >= self.max_connections and not self._evict_one():
            self._refuse(conn)
            return
        self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)

    def _evict_one(self) -> bool:
        """Close the least recently active connection with nothing in progress; False if all are busy."""
        candidates = [c for c in self.active_channels.values() if c.evictable()]
        if not candidates:
            return False
        min(candidates, key=lambda c: c.last_activity).handle_close()  # main thread; no task runs on it
        self.evicted += 1
        return True

    def _refuse(self, conn: socket.socket) -> None:
        self.refused += 1
        body = error_body("unavailable", f"the node has {self.max_connections} connections open, all busy "
                          "(TOYMB_MAX_CONNECTIONS); retry later")
        head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            conn.setblocking(False)
            conn.send(head.encode() + body)  # small: fits the socket buffer, or is dropped
        except OSError:
            pass
        finally:
            conn.close()


def ensure_fd_limit(max_connections: int) -> None:
    """Make sure the process may open ``max_connections`` sockets plus its own files.

    Raises the soft ``RLIMIT_NOFILE`` when it is too low and the hard limit allows it.

    Raises:
        ConfigError: even the hard limit is too low for ``max_connections``.
    """
    need = max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(f"max_connections={max_connections} needs {need} open files, but the hard limit "
                          f"(ulimit -Hn) is {hard}: lower TOYMB_MAX_CONNECTIONS or raise the limit")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"max_connections={max_connections} needs {need} open files, but raising the "
                          f"limit from {soft} failed ({exc}): lower TOYMB_MAX_CONNECTIONS") from None
    log.info("raised the open-files limit from %d to %d for max_connections=%d", soft, need, max_connections)
