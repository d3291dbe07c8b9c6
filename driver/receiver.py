"""The push receiver: what the broker POSTs to, and the embedded HTTP server that serves it.

The broker posts ``{"subscriber_id", "topic", "group", "messages": [envelope...]}``. The receiver
calls the subscriber's handler for each message in order; a 2xx answer acks them all, and a
handler that raises makes the answer a 500, so the broker delivers the batch again. Messages that
a failed batch had already handled are remembered (boundedly) and skipped when the batch comes
back, so only the failed message and those after it run again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from .message import Message

log = logging.getLogger(__name__)

DEFAULT_PATH = "/toymb/push"
#: Largest push body accepted: the broker's default batch (100) of its largest bodies (1 MiB), with room.
MAX_PUSH_BYTES = 128 << 20
#: Ids remembered per subscriber from partly handled batches.
DONE_CACHE = 10_000

Handler = Callable[[Message], object]


@dataclass
class _Route:
    handler: Handler
    done: OrderedDict[str, None] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_done(self, message_id: str) -> bool:
        with self.lock:
            if message_id not in self.done:
                return False
            del self.done[message_id]
            return True

    def remember(self, ids: list[str]) -> None:
        with self.lock:
            for message_id in ids:
                self.done[message_id] = None
                self.done.move_to_end(message_id)
            while len(self.done) > DONE_CACHE:
                self.done.popitem(last=False)


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": code, "message": message}


class PushDispatcher:
    """Routes push bodies to handlers by subscriber id; independent of any web framework."""

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}

    def add(self, subscriber_id: str, handler: Handler) -> None:
        """Send pushes for ``subscriber_id`` to ``handler``."""
        self._routes[subscriber_id] = _Route(handler)

    @property
    def subscriber_ids(self) -> list[str]:
        return sorted(self._routes)

    def handle(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Run one push; returns the HTTP status and JSON body to answer with."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "bad_push", "expected {subscriber_id, topic, group, messages: [...]}")
        route = self._routes.get(str(body.get("subscriber_id")))
        if route is None:
            # Not 2xx: the broker keeps the messages for a subscriber this process does not serve.
            return _error(404, "unknown_subscriber", f"no handler here for {body.get('subscriber_id')!r}")
        try:
            messages = [Message.from_envelope(e) for e in body["messages"]]
        except ValueError as exc:
            return _error(400, "bad_envelope", str(exc))
        handled: list[str] = []
        for message in messages:
            if route.take_done(message.id):
                handled.append(message.id)
                continue
            try:
                route.handler(message)
            except Exception as exc:
                log.exception("toymb: handler for %s failed on %s/%d@%d", body.get("subscriber_id"),
                              message.topic, message.partition, message.offset)
                route.remember(handled)
                return 500, {"error": "handler_failed", "message": f"{type(exc).__name__}: {exc}",
                             "id": message.id, "handled": len(handled)}
            handled.append(message.id)
        return 200, {"acked": len(handled)}


def push_wsgi_app(dispatcher: PushDispatcher, path: str = DEFAULT_PATH) -> Callable[..., Any]:
    """A WSGI app: POST ``path`` runs a push; GET ``path`` says which subscribers it serves."""

    @Request.application
    def app(request: Request) -> Response:
        if request.path.rstrip("/") != path.rstrip("/"):
            return _json(*_error(404, "not_found", f"pushes go to {path}"))
        if request.method == "GET":
            return _json(200, {"status": "up", "subscribers": dispatcher.subscriber_ids})
        if request.method != "POST":
            return _json(*_error(405, "method_not_allowed", "POST a push here"))
        if (request.content_length or 0) > MAX_PUSH_BYTES:
            return _json(*_error(413, "payload_too_large", f"pushes are limited to {MAX_PUSH_BYTES} bytes"))
        request.max_content_length = MAX_PUSH_BYTES
        try:
            body = json.loads(request.get_data(cache=False))
        except ValueError:
            return _json(*_error(400, "bad_json", "the push body is not JSON"))
        return _json(*dispatcher.handle(body))

    return app


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("toymb: push %s %s -> %s", self.command, self.path, code)


class Receiver:
    """The embedded HTTP server: serves :func:`push_wsgi_app` on ``host:port`` in a thread.

    ``port=0`` picks a free port; :attr:`port` tells which after :meth:`start`.
    """

    def __init__(self, dispatcher: PushDispatcher, *, host: str = "127.0.0.1", port: int = 0,
                 path: str = DEFAULT_PATH) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.path = path
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; raises OSError when the port is taken."""
        server = make_server(self.host, self.port, push_wsgi_app(self.dispatcher, self.path), threaded=True,
                             request_handler=_QuietHandler)
        self._server = server
        self.port = server.server_port
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"toymb-receiver-{self.port}", daemon=True)
        self._thread.start()
        log.info("toymb: push receiver listening on http://%s:%d%s", self.host, self.port, self.path)

    @property
    def local_url(self) -> str:
        """The receiver's URL as reachable on this host."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{self.path}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
