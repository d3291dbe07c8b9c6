"""The push receiver: what the broker POSTs to, and the embedded HTTP server that serves it.

The broker posts ``{"subscriber_id", "topic", "group", "messages": [envelope...]}``. The receiver
calls the subscriber's handler for each message in order; a 2xx answer acks them all, and a
handler that raises makes the answer a 500, so the broker delivers the batch again. Messages that
a failed batch had already handled are remembered (boundedly) and skipped when the batch comes
back, so only the failed message and those after it run again.

Signatures: once a subscriber has a secret (the broker returns one at registration, and the
:class:`~driver.consumer.Consumer` hands it over), every push for it must carry a valid Standard
Webhooks signature with a fresh timestamp, or it is answered 401 and no handler runs. The last
two secrets are accepted, so a rotation loses nothing.
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
from .signatures import DEFAULT_TOLERANCE_S, SignatureError, Verifier

SUBSCRIBER_HEADER = "toymb-subscriber-id"

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

    def __init__(self, *, tolerance_s: int = DEFAULT_TOLERANCE_S) -> None:
        self._routes: dict[str, _Route] = {}
        self._secrets: dict[str, list[str]] = {}
        self.tolerance_s = tolerance_s

    def add(self, subscriber_id: str, handler: Handler, secret: str | None = None) -> None:
        """Send pushes for ``subscriber_id`` to ``handler``; with ``secret``, only signed ones."""
        self._routes[subscriber_id] = _Route(handler)
        if secret is not None:
            self.set_secret(subscriber_id, secret)

    def set_secret(self, subscriber_id: str, secret: str) -> None:
        """Check pushes for ``subscriber_id`` against ``secret`` from now on (and the previous one,
        which the broker keeps signing with during a rotation's overlap)."""
        Verifier([secret])  # raises SignatureError on a malformed secret
        known = self._secrets.get(subscriber_id, [])
        self._secrets[subscriber_id] = [secret, *[s for s in known if s != secret]][:2]

    def verify(self, subscriber_id: str, headers: Any, raw: bytes) -> tuple[int, dict[str, Any]] | None:
        """None when the push may be handled; else the 401 to answer. Unsigned pushes pass only for a
        subscriber without a secret."""
        secrets = self._secrets.get(subscriber_id)
        if not secrets:
            return None
        try:
            Verifier(secrets, tolerance_s=self.tolerance_s).verify(dict(headers.items()), raw)
        except SignatureError as exc:
            log.warning("toymb: refused a push for %s: %s", subscriber_id, exc)
            return _error(401, "bad_signature", str(exc))
        return None

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
        raw = request.get_data(cache=False)
        return _json(*handle_signed(dispatcher, request.headers, raw))

    return app


def handle_signed(dispatcher: PushDispatcher, headers: Any, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Check a push's signature (when its subscriber has a secret), then run it."""
    try:
        body = json.loads(raw)
    except ValueError:
        return _error(400, "bad_json", "the push body is not JSON")
    named = headers.get(SUBSCRIBER_HEADER)
    sid = str(body.get("subscriber_id")) if isinstance(body, dict) else ""
    if named is not None and named != sid:
        return _error(400, "bad_push", "the subscriber id of the headers and the body differ")
    refused = dispatcher.verify(sid, headers, raw)
    if refused is not None:
        return refused
    return dispatcher.handle(body)


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
