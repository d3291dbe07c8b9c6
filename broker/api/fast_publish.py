"""The publish fast path: ``POST /v1/topics/<topic>/messages`` served in front of Flask.

Publishing is the hot path of a broker, and Flask's per-request work (a request object, URL
matching, context locals, hooks, a response object) cost more than the publish itself. This WSGI
middleware serves a publish that this node can answer itself, with the same rules as Flask:

- which route and role: the route table's own declaration of ``topics.publish``;
- who may call: :meth:`broker.security.Authorizer.decide`, the rule Flask's guard applies;
- what the body must be and how it is stored: :meth:`broker.publish.Publisher.publish_body`,
  the handler's rules (:meth:`~broker.publish.Publisher.parse_payload`), limits and metrics;
- how errors look: :func:`broker.api.answers.error_answer`, Flask's error handler's mapping.

Everything else goes to Flask unchanged: other routes, a topic this node does not own (Flask
forwards it to the owner), a body without a usable ``Content-Length`` or over the request limit,
and a caller the authorizer refuses (Flask answers it, counts the failure and adds the challenge).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BadRequest, BrokerError
from ..security.authz import Need
from .answers import error_answer
from .fast_json import answer_bytes, stored_answer_bytes

if TYPE_CHECKING:
    from ..node import Node
    from ..outcomes import Stored
    from ..publish import PendingPublish
    from ..security import Authorizer
    from .routes import Routes

StartResponse = Callable[..., Any]
# An answer: (status line, headers, body).
Answer = tuple[str, list[tuple[str, str]], bytes]


class Respond(Protocol):
    """How an inline publish is answered, from any thread (:class:`broker.aserver.Respond`)."""

    def __call__(self, make: Callable[[], Answer], /) -> None:
        """Answer with what ``make()`` returns, made on the loop."""

    def soon(self, job: Callable[[], None], /) -> None:
        """Run ``job()`` on the loop, before the answer."""

    def together(self, answers: list[tuple[Any, Callable[[], Answer]]], /) -> None:
        """Answer each ``(respond, make)`` as ``respond(make)`` would, in one hand-over to the loop."""


WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

PREFIX = "/v1/topics/"
SUFFIX = "/messages"
PUBLISH_ENDPOINT = "topics.publish"
# Bodies up to this are taken inline (perhaps parsed on the server's loop thread): parsing one
# costs well under a millisecond, so other connections' reads and writes are never held up for long.
INLINE_MAX_BYTES = 64 * 1024
_REASONS = {200: "200 OK", 201: "201 Created", 400: "400 Bad Request", 403: "403 Forbidden",
            413: "413 Payload Too Large", 422: "422 Unprocessable Entity", 500: "500 Internal Server Error",
            503: "503 Service Unavailable"}


class EnvironHeaderView:
    """A request's headers as the authorizer reads them (:class:`broker.security.authz.Headers`),
    from the WSGI environ: what werkzeug's ``EnvironHeaders.get`` gives for a name, without making
    one (its construction alone cost about 2.8 µs of a worker's CPU per publish)."""

    __slots__ = ("environ",)

    def __init__(self, environ: dict[str, Any]) -> None:
        self.environ = environ

    def get(self, key: str) -> str | None:
        """The header ``key``'s value, None when the request has none (as ``EnvironHeaders.get``)."""
        name = key.upper().replace("-", "_")
        value: str | None = self.environ.get(name if name in _UNPREFIXED else f"HTTP_{name}")
        return value


# The two headers WSGI keeps without the HTTP_ prefix (PEP 3333).
_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


class PublishFastPath:
    """WSGI middleware: answers the publishes this node owns, hands every other request to ``app``.

    It is also the writer's :class:`~broker.outcomes.Teller` of the publishes it took inline: the
    writer tells it a commit's publishes at once, and it hands their answers to the loop at once.
    """

    def __init__(self, app: WSGIApp, node: Node, authorizer: Authorizer, routes: Routes) -> None:
        route = routes.match(PUBLISH_ENDPOINT, "POST")
        if route is None:
            raise LookupError(f"the route table has no {PUBLISH_ENDPOINT}")
        self.app = app
        self.node = node
        self.authorizer = authorizer
        self.role = route.role
        self.legacy = route.legacy
        self.max_request = node.settings.max_request

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        topic = self._own_topic(environ)
        length = self._length(environ) if topic is not None else None
        if topic is None or length is None or not self._allowed(environ, topic):
            return self.app(environ, start_response)
        try:
            status, answer = self.node.publisher.publish_body(topic, self._body(environ, length))
            headers: dict[str, str] = {}
        except Exception as exc:  # noqa: BLE001 - every failure is answered, as Flask's handler would
            status, answer, headers = error_answer(exc, self.max_request)
        status_line, header_list, body = self._answer(status, answer, headers)
        start_response(status_line, header_list)
        return [body]

    def inline(self, environ: dict[str, Any], respond: Respond) -> bool:
        """Take a publish without holding a thread while it commits; False to leave it to :meth:`__call__`.

        Called by the server on its loop thread (``TOYMB_INLINE_PUBLISH``) or on a worker thread,
        which is then free as soon as this returns. Taken only when nothing in it can block: a
        small body, a topic this node owns and knows, with no enrichers. ``respond(status,
        headers, body)`` is then called once, from the writer's thread when the commit ends (or at
        once for a refusal of the body).
        """
        topic = self._own_topic(environ)
        length = self._length(environ) if topic is not None else None
        if (topic is None or length is None or length > INLINE_MAX_BYTES
                or not self.node.publisher.answers_inline(topic) or not self._allowed(environ, topic)):
            return False
        try:
            self.node.publisher.begin(topic, self._body(environ, length), self._committed, None, self, respond)
        except Exception as exc:  # noqa: BLE001 - every failure is answered, as Flask's handler would
            refusal = self._answer(*error_answer(exc, self.max_request))
            respond(lambda: refusal)
        return True

    def prepare_all(self, told: list[tuple[PendingPublish, list[Stored]]], /) -> None:
        """Run by the writer just before its commit's sync (:class:`~broker.outcomes.Teller`): the
        loop makes the answers meanwhile (the sync holds no GIL), so that after the commit they
        are only sent. One job on the loop for the whole commit."""
        told[0][0].reply.soon(functools.partial(self._prepared_answers, told))

    def _prepared_answers(self, told: list[tuple[PendingPublish, list[Stored]]]) -> None:
        answer_status = self.node.publisher.answer_status
        for pending, stored in told:
            is_batch = pending.is_batch
            pending.prepared = (stored, _framed(answer_status(is_batch, stored), stored_answer_bytes(is_batch, stored),
                                                {}))

    def set_results(self, told: list[tuple[PendingPublish, list[Stored]]], /) -> None:
        """Run by the writer once its commit held (:class:`~broker.outcomes.Teller`): the answers
        are made later, on the loop, so that the writer's next commit does not wait for them;
        all of them handed over at once."""
        for pending, stored in told:
            pending.stored = stored
        answers = [(pending.reply, functools.partial(self._committed_answer, pending)) for pending, _ in told]
        told[0][0].reply.together(answers)

    def _committed(self, pending: PendingPublish) -> None:
        # Run by the writer when it tells this publish alone (it failed): the answer is made on the loop.
        pending.reply(functools.partial(self._committed_answer, pending))

    def _committed_answer(self, pending: PendingPublish) -> Answer:
        prepared = pending.prepared
        if prepared is not None and pending.error is None and prepared[0] is pending.stored:
            # Made while the commit synced, for the coordinates it committed: sent only now.
            self.node.publisher.settle(pending)
            return prepared[1]  # type: ignore[no-any-return]
        try:
            status, answer = self.node.publisher.finish(pending)
            headers: dict[str, str] = {}
        except Exception as exc:  # noqa: BLE001 - every failure is answered, as Flask's handler would
            status, answer, headers = error_answer(exc, self.max_request)
        return self._answer(status, answer, headers)

    def _allowed(self, environ: dict[str, Any], topic: str) -> bool:
        """Whether the caller may publish; a refused one is Flask's to answer (it counts the failure)."""
        try:
            self.authorizer.decide(Need(self.role, topic, self.legacy), EnvironHeaderView(environ),
                                   environ.get("REMOTE_ADDR"))
        except BrokerError:
            return False
        return True

    @staticmethod
    def _body(environ: dict[str, Any], length: int) -> bytes:
        raw: bytes = environ["wsgi.input"].read(length)
        if len(raw) != length:
            raise BadRequest("the body ended before its Content-Length", code="bad_json")
        return raw

    @staticmethod
    def _answer(status: int, answer: Any, headers: dict[str, str]) -> Answer:
        return _framed(status, answer_bytes(answer), headers)

    def _own_topic(self, environ: dict[str, Any]) -> str | None:
        """The topic of a publish request for a topic this node owns now; None for anything else."""
        if environ.get("REQUEST_METHOD") != "POST":
            return None
        path: str = environ.get("PATH_INFO", "")
        if not (path.startswith(PREFIX) and path.endswith(SUFFIX)) or environ.get("QUERY_STRING"):
            return None
        topic = path[len(PREFIX):-len(SUFFIX)]
        if not topic or "/" in topic or not self.node.router.owns(topic):
            return None
        return topic

    def _length(self, environ: dict[str, Any]) -> int | None:
        """The body's Content-Length when it is plain and within the request limit; None otherwise."""
        declared = environ.get("CONTENT_LENGTH", "")
        if not declared.isdigit() or len(declared) > 18 or environ.get("HTTP_TRANSFER_ENCODING"):
            return None
        length = int(declared)
        return length if 0 < length <= self.max_request else None


def _framed(status: int, body: bytes, headers: dict[str, str]) -> Answer:
    """A JSON answer's status line, headers and ``body``."""
    return (_REASONS.get(status, f"{status} Error"),
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers.items()], body)
