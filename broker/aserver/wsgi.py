"""Running the WSGI app on worker threads, its answer streamed back to the loop with back-pressure.

A worker hands each piece of an answer to the loop and waits while the connection's outgoing
buffer is over its high-water mark, so a client that stops reading holds one worker and a bounded
buffer, never a growing one.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .framing import response_head, server_fault

if TYPE_CHECKING:
    from .protocol import Connection
    from .request import Request
    from .server import Answer as InlineAnswer

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# Bytes handed to the loop but not yet written to the transport, at most, per connection.
QUEUED_HIGH = 256 * 1024
_NO_BODY = ("1", "204", "304")   # status codes whose answers never have a body (1xx, 204, 304)


class ClientGone(Exception):
    """The connection closed while its answer was being sent."""


class Outlet:
    """A connection's output as worker threads see it: sends wait while the client is behind."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.ready = threading.Condition()
        self.queued = 0        # bytes handed to the loop, not yet in the transport
        self.paused = False    # the transport's buffer is over its high-water mark
        self.closed = False

    def send(self, data: bytes, request: Request | None) -> None:
        """Send ``data`` (any thread but the loop's); with ``request``, that request's answer is then whole.

        Waits while the client is behind, except for an answer's last piece: the worker is then
        free at once, and the connection holds at most its buffer's high-water mark plus that piece
        (which exists in memory anyway). A client that never reads a large answer holds no thread.

        Raises:
            ClientGone: the connection closed.
        """
        if request is not None:
            # Not counted in ``queued``: the next answer starts only after the loop has written this.
            self._hand_over(self.connection.write_last, data, request)
            return
        with self.ready:
            while (self.paused or self.queued > QUEUED_HIGH) and not self.closed:
                self.ready.wait()
            if self.closed:
                raise ClientGone
            self.queued += len(data)
        self._hand_over(self.connection.write_queued, data)

    def _hand_over(self, write: Callable[..., None], *args: Any) -> None:
        if self.closed:
            raise ClientGone
        try:
            self.connection.loop.call_soon_threadsafe(write, *args)
        except RuntimeError:   # the loop has ended: the node stopped (a long poll cut by the drain)
            raise ClientGone from None

    def written(self, size: int) -> None:
        """The loop put ``size`` queued bytes into the transport."""
        with self.ready:
            self.queued -= size
            self.ready.notify_all()

    def set_paused(self, paused: bool) -> None:
        with self.ready:
            self.paused = paused
            self.ready.notify_all()

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()


class InlineReply:
    """How the inline handler answers a request it took (:class:`~.server.Respond`), from any thread."""

    __slots__ = ("connection", "request")

    def __init__(self, connection: Connection, request: Request) -> None:
        self.connection = connection
        self.request = request

    def __call__(self, make: Callable[[], InlineAnswer], /) -> None:
        """The request's answer, made by ``make()`` on the loop."""
        self.connection.server.post_all([(self.connection, self.request, make)])

    def soon(self, job: Callable[[], None], /) -> None:
        """Run ``job()`` on the loop before the answer (it may prepare it)."""
        self.connection.server.post_job(job)

    def together(self, answers: list[tuple[InlineReply, Callable[[], InlineAnswer]]], /) -> None:
        """Answer each ``(reply, make)`` as ``reply(make)`` would, in one hand-over to the loop
        (the replies are all of this server's)."""
        self.connection.server.post_all([(reply.connection, reply.request, make) for reply, make in answers])


class WorkerPool:
    """``size`` daemon threads running jobs in turn: a stopping node never waits for a long poll."""

    def __init__(self, size: int) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"http-worker-{n}", daemon=True)
                        for n in range(size)]
        for thread in self.threads:
            thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        self.jobs.put(job)

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                job()
            except Exception:
                log.exception("an HTTP worker's job failed")

    def shutdown(self) -> None:
        """Let every thread end after its current job."""
        for _ in self.threads:
            self.jobs.put(None)


def run_request(connection: Connection, request: Request, environ: dict[str, Any]) -> None:
    """Serve ``request`` on this (worker) thread: the server's inline handler when it is not run
    on the loop and takes the request (its answer then comes later, through the loop), else the app."""
    if not take_inline(connection, request, environ):
        run_app(connection.server.app, connection, request, environ)


def run_requests(batch: list[tuple[Connection, Request, dict[str, Any]]]) -> None:
    """Requests the loop handed over in one turn (:meth:`~broker.aserver.server.Server.hand_over`),
    on this one worker thread: those the inline handler takes cost no wake-up of a thread each;
    every other one goes to a worker thread of its own, so that none waits behind a slow one."""
    for connection, request, environ in batch:
        if not take_inline(connection, request, environ):
            server = connection.server
            server.workers.submit(functools.partial(run_app, server.app, connection, request, environ))


def take_inline(connection: Connection, request: Request, environ: dict[str, Any]) -> bool:
    """Offer ``request`` to the server's inline handler on this (worker) thread; whether it was
    taken (or answered with a 500 because the handler failed)."""
    server = connection.server
    inline = server.inline
    if inline is None or server.inline_on_loop:
        return False
    try:
        return inline(environ, InlineReply(connection, request))
    except Exception:
        log.exception("the inline handler failed on %s %s", request.method, request.url[:200])
        _send_fault(connection, request)
        return True


def _send_fault(connection: Connection, request: Request) -> None:
    """Answer ``request`` with the server's JSON 500, in order, and close (a worker thread)."""
    request.keep_alive = False
    try:
        connection.outlet.send(server_fault().answer(connection.server.ident), request)
    except ClientGone:
        pass


def run_app(app: WSGIApp, connection: Connection, request: Request, environ: dict[str, Any]) -> None:
    """Call ``app`` for ``request`` on this (worker) thread and send its answer in order."""
    answer = Answer(connection, request)
    result: Iterable[bytes] | None = None
    try:
        result = app(environ, answer.start_response)
        answer.send_all(result)
    except ClientGone:
        pass
    except Exception:
        log.exception("the app failed answering %s %s", request.method, request.url[:200])
        if answer.head_sent:
            connection.loop.call_soon_threadsafe(connection.abort)
        else:
            _send_fault(connection, request)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                log.exception("closing the app's answer failed")


class Answer:
    """The answer a worker is sending: WSGI's start_response, then its body, framed."""

    def __init__(self, connection: Connection, request: Request) -> None:
        self.connection = connection
        self.request = request
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.head_sent = False

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        if self.head_sent and exc_info is not None:
            raise exc_info[1].with_traceback(exc_info[2])
        self.status, self.headers = status, list(headers)
        return self._write_legacy

    def _write_legacy(self, data: bytes) -> None:
        raise NotImplementedError("the write() callable of start_response is not supported")

    def send_all(self, result: Iterable[bytes]) -> None:
        request = self.request
        has_body = not self.status.startswith(_NO_BODY) and request.method != "HEAD"
        length = next((value for name, value in self.headers if name.lower() == "content-length"), None)
        close = not request.keep_alive or self.connection.server.draining or any(
            name.lower() == "connection" and value.lower() == "close" for name, value in self.headers)
        headers = [(n, v) for n, v in self.headers if n.lower() not in ("connection", "transfer-encoding")]
        chunked = False
        if length is None and isinstance(result, (list, tuple)) and len(result) == 1:
            headers.append(("Content-Length", str(len(result[0]))))
            length = str(len(result[0]))
        if length is None and not self.status.startswith(_NO_BODY):
            if request.version == "1.1":
                chunked = True
                headers.append(("Transfer-Encoding", "chunked"))
            else:
                close = True     # the answer's end is the connection's
        connection = "close" if close else ("Keep-Alive" if request.version == "1.0" else None)
        if close:
            request.keep_alive = False
        head = response_head(request.version, self.status, headers, self.connection.server.ident, connection)
        outlet = self.connection.outlet
        # Each piece is held back until the next one comes, so that the last goes with the answer's
        # end: one handoff to the loop for an answer of one piece (Flask's usual), whatever its iterable.
        held, held_body = head, False
        for chunk in result:
            if not chunk or not has_body:
                continue
            if chunked:
                chunk = b"%x\r\n%b\r\n" % (len(chunk), chunk)
            if held_body:
                self.head_sent = True
                outlet.send(held, None)
                held = chunk
            else:
                held += chunk   # the head goes with the first piece
            held_body = True
        if chunked and has_body:
            held += b"0\r\n\r\n"
        self.head_sent = True
        outlet.send(held, request)
