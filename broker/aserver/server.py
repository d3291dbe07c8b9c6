"""The node's HTTP server: asyncio on uvloop, one loop thread, a connection cap, timeouts and a drain.

* The node always accepts. At ``max_connections`` it closes the least recently active connection
  that has nothing in progress; if every connection is busy, the newcomer gets a JSON 503.
* A request's headers must be whole ``header_timeout`` after its first byte (slowloris); a
  connection with no request in progress is closed after ``idle_timeout``, including one that
  never sends a byte. A request being served (a long poll) is never cut.
* :meth:`Server.drain` stops accepting, closes idle connections at once and each busy one after
  its answer; it cuts a connection whose answer makes no progress for ``stall_timeout`` (a client
  that stopped reading), and whatever is still open after ``drain_timeout``.

Requests go to the WSGI app on ``threads`` worker threads. The ``inline`` handler (the publish
fast path) is offered each request first, on the loop's thread with ``inline_on_loop``, else on
the worker thread; a request it takes holds no thread while it commits: the handler answers it
later, from any thread, and the loop sends the answer (:class:`Respond`; ``respond.soon(job)``
lets the loop prepare it first, while the commit syncs).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import uvloop

from ..errors import ConfigError
from .framing import Refusal, server_fault
from .protocol import Connection
from .request import Request
from .wsgi import WorkerPool, WSGIApp, run_request, run_requests

log = logging.getLogger(__name__)

# Descriptors a node needs besides its HTTP connections: listening socket, loop, log, SQLite
# files or PostgreSQL pool, outgoing push and forward connections, spooled bodies.
FD_RESERVE = 256
BACKLOG = 1024
DRAIN_SWEEP_S = 0.05
# An answer: (status line, headers, body).
Answer = tuple[str, list[tuple[str, str]], bytes]


class Respond(Protocol):
    """How an inline handler answers a request it took, from any thread."""

    def __call__(self, make: Callable[[], Answer], /) -> None:
        """Answer with what ``make()`` returns, made on the loop."""

    def soon(self, job: Callable[[], None], /) -> None:
        """Run ``job()`` on the loop, before any answer posted after it (it answers nothing)."""

    def together(self, answers: list[tuple[Any, Callable[[], Answer]]], /) -> None:
        """Answer each ``(respond, make)`` of ``answers`` as ``respond(make)`` would, in one
        hand-over to the loop (one lock, at most one wake-up); each ``respond`` one of this server's."""


# A handler of requests served on the loop's thread: (environ, respond) -> taken.
InlineHandler = Callable[[dict[str, Any], Respond], bool]


class Server:
    """An HTTP/1.1 server for one WSGI app; bound at construction, served by :meth:`run`."""

    def __init__(self, app: WSGIApp, *, host: str, port: int, threads: int, max_connections: int,
                 idle_timeout: float, header_timeout: float, max_request: int, ident: str = "toymb",
                 inline: InlineHandler | None = None, inline_on_loop: bool = True) -> None:
        self.app = app
        self.inline = inline
        self.inline_on_loop = inline_on_loop
        self.threads = threads
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.max_request = max_request
        self.ident = ident
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.socket.setblocking(False)
        self.effective_port: int = self.socket.getsockname()[1]
        self.port_text = str(self.effective_port)
        self.server_name = socket.gethostname() if host in ("", "0.0.0.0", "::") else host
        # Sweep often enough that a timeout is late by at most about half of itself (and 1 s).
        self.sweep_interval = min(1.0, idle_timeout / 2, header_timeout / 2)
        self.connections: dict[Connection, None] = {}   # insertion-ordered set
        self.evicted = self.refused = 0
        self.next_report = 0.0
        self.draining = False
        self.drain_started = self.drain_deadline = self.drain_stall = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self.listener: asyncio.Server | None = None
        self.stopped: asyncio.Future[None] | None = None
        self._workers: WorkerPool | None = None
        # Inline answers from other threads, sent by one call on the loop however many are posted:
        # a commit answers a whole batch of publishes, and each wake-up of the loop is a syscall.
        self._outbox: list[tuple[Connection, Request, Callable[[], Answer]]] = []
        self._jobs: list[Callable[[], None]] = []   # run on the loop before the outbox's answers
        self._outbox_lock = threading.Lock()
        # Publishes the loop hands to the worker threads in this turn of the loop (hand_over).
        self._handover: list[tuple[Connection, Request, dict[str, Any]]] = []

    @property
    def workers(self) -> WorkerPool:
        assert self._workers is not None, "run() starts the workers"
        return self._workers

    def event_loop(self) -> asyncio.AbstractEventLoop:
        assert self.loop is not None, "run() starts the loop"
        return self.loop

    def run(self, signals: Iterable[int] = (), on_signal: Callable[[int], None] | None = None) -> None:
        """Serve until :meth:`drain` ends; ``on_signal(signum)`` runs on the loop's thread for each of ``signals``."""
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._serve(tuple(signals), on_signal))

    async def _serve(self, signals: tuple[int, ...], on_signal: Callable[[int], None] | None) -> None:
        loop = self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.stopped = loop.create_future()
        for signum in signals:
            assert on_signal is not None
            loop.add_signal_handler(signum, on_signal, signum)
        self._workers = WorkerPool(self.threads)
        try:
            self.listener = await loop.create_server(lambda: Connection(self), sock=self.socket, backlog=BACKLOG)
            loop.call_later(self.sweep_interval, self._sweep)
            await self.stopped
        finally:
            self._workers.shutdown()
            for signum in signals:
                loop.remove_signal_handler(signum)

    def drain(self, stall_timeout: float, drain_timeout: float) -> None:
        """Stop accepting and let :meth:`run` return once in-flight answers are sent (any thread).

        A connection that neither sends nor receives a byte for ``stall_timeout`` s after the call
        is cut, and so is every connection still open ``drain_timeout`` s after it.
        """
        loop = self.loop
        if loop is not None and threading.get_ident() != self.loop_thread:
            loop.call_soon_threadsafe(self.drain, stall_timeout, drain_timeout)
            return
        if self.draining:
            return
        self.draining = True
        now = time.monotonic()
        self.drain_started, self.drain_deadline, self.drain_stall = now, now + drain_timeout, stall_timeout
        if self.listener is not None:
            self.listener.close()
        else:
            self.socket.close()
        self._sweep()

    def hand_over(self, connection: Connection, request: Request, environ: dict[str, Any]) -> None:
        """Give ``request`` to the worker threads (the loop's thread).

        With an ``inline`` handler run on worker threads, the publishes received in one turn of
        the loop go to one worker as one job, which offers each to the handler (a few tens of µs
        each): one thread wake-up for them all instead of one each (a wake-up and the switch to
        that thread cost about as much as the handler). Anything else gets a worker of its own.
        """
        if self.inline is None or self.inline_on_loop or environ["REQUEST_METHOD"] != "POST":
            self.workers.submit(functools.partial(run_request, connection, request, environ))
            return
        self._handover.append((connection, request, environ))
        if len(self._handover) == 1:
            self.event_loop().call_soon(self._hand_over_turn)

    def _hand_over_turn(self) -> None:
        batch, self._handover = self._handover, []
        if len(batch) == 1:
            self.workers.submit(functools.partial(run_request, *batch[0]))
        else:
            self.workers.submit(functools.partial(run_requests, batch))

    def post_all(self, answers: list[tuple[Connection, Request, Callable[[], Answer]]]) -> None:
        """Queue inline requests' answers for the loop to make (``make()``) and send (any thread): one
        request's, or all of a commit's publishes' at once."""
        with self._outbox_lock:
            first = not self._outbox and not self._jobs
            self._outbox.extend(answers)
        if first and answers:
            self._wake_loop()

    def post_job(self, job: Callable[[], None]) -> None:
        """Queue ``job()`` for the loop, run before the answers posted after it (any thread)."""
        with self._outbox_lock:
            self._jobs.append(job)
            first = len(self._outbox) + len(self._jobs) == 1
        if first:
            self._wake_loop()

    def _wake_loop(self) -> None:
        try:
            self.event_loop().call_soon_threadsafe(self._send_posted)
        except RuntimeError:
            pass   # the loop has ended (the node stopped): its connections are gone too

    def _send_posted(self) -> None:
        with self._outbox_lock:
            posted, self._outbox = self._outbox, []
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job()
            except Exception:   # a job only prepares: the answer after it is still made and sent
                log.exception("a job posted to the loop failed")
        for connection, request, make in posted:
            try:
                status, headers, body = make()
            except Exception:   # a fault of the handler is a JSON 500, not a hung connection
                log.exception("making the answer of %s %s failed", request.method, request.url[:200])
                connection.refuse_inline(request, server_fault())
                continue
            connection.send_inline(request, status, headers, body)

    def admit(self, connection: Connection) -> bool:
        """Register a new connection, making room at the cap; False if every connection is busy."""
        if len(self.connections) >= self.max_connections and not self._evict_one():
            self.refused += 1
            return False
        self.connections[connection] = None
        return True

    def forget(self, connection: Connection) -> None:
        self.connections.pop(connection, None)
        if self.draining and not self.connections and self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(None)

    def busy_refusal(self) -> bytes:
        """The 503 a newcomer gets when every connection is busy."""
        return Refusal(503, f"the node has {self.max_connections} connections open, all busy "
                       "(TOYMB_MAX_CONNECTIONS); retry later").answer(self.ident, retry_after=True)

    def _evict_one(self) -> bool:
        """Close the least recently active connection with nothing in progress; False if all are busy."""
        candidates = [c for c in self.connections if not c.closed and c.evictable()]
        if not candidates:
            return False
        min(candidates, key=lambda c: c.last_activity).close()
        self.evicted += 1
        return True

    def _sweep(self) -> None:
        now = time.monotonic()
        if self.draining:
            cut_all = now >= self.drain_deadline
            stalled_before = now - self.drain_stall
            for connection in list(self.connections):
                connection.track_progress(now)
                if cut_all or max(connection.last_activity, self.drain_started) < stalled_before:
                    connection.abort()
                elif not connection.busy():
                    connection.close()
            if not self.connections and self.stopped is not None and not self.stopped.done():
                self.stopped.set_result(None)
            self.event_loop().call_later(DRAIN_SWEEP_S, self._sweep)
            return
        header_cutoff, idle_cutoff = now - self.header_timeout, now - self.idle_timeout
        for connection in list(self.connections):
            connection.track_progress(now)
            if connection.overdue(header_cutoff, idle_cutoff):
                connection.close()
        if (self.evicted or self.refused) and now >= self.next_report:
            log.warning("at max_connections=%d: closed %d idle connections, refused %d new ones",
                        self.max_connections, self.evicted, self.refused)
            self.evicted = self.refused = 0
            self.next_report = now + 10
        self.event_loop().call_later(self.sweep_interval, self._sweep)


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
