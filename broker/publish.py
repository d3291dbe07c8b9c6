"""The publish path: validate, enrich, then hand to the group-commit writer."""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from driver.names import NAME_PATTERN, is_name

from .enrichers import TopicEnricher, load_enrichers
from .envelope import Limits, NewMessage, decode_body, parse_message
from .errors import BadRequest, LimitExceeded, Unprocessable
from .publish_decode import decode_publish
from .random_ids import new_ids
from .strict_json import parse_json

if TYPE_CHECKING:
    from .appender import Appender
    from .config import Settings
    from .metrics import Metrics
    from .outcomes import Stored, Teller
    from .topics import Topics

log = logging.getLogger(__name__)
_DUPLICATE = operator.attrgetter("duplicate")   # of a Stored


def check_name(name: Any, what: str = "topic") -> str:
    """A topic or group name, or BadRequest saying what is allowed."""
    if not is_name(name):
        raise BadRequest(f"{what} name must match {NAME_PATTERN}", code=f"bad_{what}_name")
    return name


class PendingPublish:
    """A publish handed to the writer without a thread waiting for it.

    The writer tells it the outcome (it is the writer's :class:`~broker.outcomes.Outcome`), and it
    calls ``then(self)`` on the writer's thread; :meth:`Publisher.finish` makes the answer from it.
    With ``early``, the writer's :meth:`prepare` calls ``early(self, stored)`` before the commit:
    the answerer may make the answer meanwhile and keep it in :attr:`prepared`, and send it only
    after ``then`` told it the commit held (with ``stored`` the very list then told).

    With a ``teller`` (:class:`broker.outcomes.Teller`), the writer tells the teller instead, for
    all of a commit's publishes at once (it sets :attr:`stored` and answers); ``then`` still hears
    a failure. ``reply`` is the answerer's, for the teller (how to answer this publish).
    """

    __slots__ = ("early", "error", "is_batch", "prepared", "reply", "started", "stored", "teller", "then")

    def __init__(self, started: float, is_batch: bool, then: Callable[[PendingPublish], None],
                 early: Callable[[PendingPublish, list[Stored]], None] | None = None,
                 teller: Teller | None = None, reply: Any = None) -> None:
        self.started = started
        self.is_batch = is_batch
        self.then = then
        self.early = early
        self.teller = teller
        self.reply = reply
        self.stored: list[Stored] | None = None
        self.error: BaseException | None = None
        self.prepared: Any = None   # what the answerer made of the coordinates ``prepare`` told

    def prepare(self, stored: list[Stored], /) -> None:
        if self.early is not None:
            self.early(self, stored)

    def set_result(self, stored: list[Stored], /) -> None:
        self.stored = stored
        self._done()

    def set_exception(self, error: BaseException, /) -> None:
        self.error = error
        self._done()

    def _done(self) -> None:
        # On the writer's thread, between the answers of one commit: a failing ``then`` must not
        # keep the others from theirs (a Future's callbacks are guarded the same way).
        try:
            self.then(self)
        except Exception:
            log.exception("answering a committed publish failed")


class Publisher:
    """The publish path of a node: validate, enrich, append; with its metrics."""

    def __init__(self, settings: Settings, topics: Topics, appender: Appender, metrics: Metrics) -> None:
        self.settings = settings
        self.topics = topics
        self.appender = appender
        self.metrics = metrics
        self.limits = Limits.from_settings(settings)
        self.enrichers: dict[str, list[TopicEnricher]] = {}

    def load_enrichers(self) -> None:
        """Load and initialise the configured enrichers (once, when the node starts)."""
        self.enrichers = load_enrichers(self.settings.enriching_topics)

    def parse_payload(self, payload: Any) -> tuple[list[NewMessage], bool]:
        """The messages of a publish body, and whether it was a batch."""
        if isinstance(payload, dict) and "messages" in payload:
            if set(payload) != {"messages"}:
                raise BadRequest("a batch is {\"messages\": [...]} and nothing else", code="bad_batch")
            items = payload["messages"]
            if not isinstance(items, list) or not items:
                raise BadRequest("messages must be a non-empty list", code="bad_batch")
            limit = self.settings.max_batch
            if len(items) > limit:
                raise LimitExceeded(f"a batch holds at most {limit} messages", limit="batch", max=limit)
            now_ms = int(time.time() * 1000)
            ids = new_ids(len(items))
            pairs = zip(items, ids, strict=True)
            return [parse_message(item, self.limits, new_id, now_ms) for item, new_id in pairs], True
        return [parse_message(payload, self.limits)], False

    def read(self, raw: bytes) -> tuple[list[NewMessage], bool]:
        """The messages of a publish body as sent, and whether it was a batch: what
        :meth:`parse_payload` gives for the body's JSON, decoded natively when it is plainly valid
        (:mod:`broker.publish_decode`)."""
        decoded = decode_publish(raw, self.limits, self.settings.max_batch)
        return decoded if decoded is not None else self.parse_payload(parse_json(raw))

    def enrich(self, topic: str, messages: list[NewMessage]) -> list[NewMessage]:
        enrichers = self.enrichers.get(topic)
        if not enrichers:
            return messages
        out = []
        for message in messages:
            as_dict: dict[str, Any] = {"id": message.id, "key": message.key, "headers": dict(message.headers),
                                       "content_type": message.content_type,
                                       **decode_body(message.content_type, message.body)}
            for enricher in enrichers:
                try:
                    as_dict = enricher.enrich(as_dict)
                except Exception as exc:  # noqa: BLE001 - any failure rejects the publish
                    raise Unprocessable(f"enricher {type(enricher).__name__} rejected the message: {exc}",
                                        code="enricher_failed") from None
            if not isinstance(as_dict, dict) or as_dict.get("id") != message.id:
                raise Unprocessable("an enricher must return the message dict with its id unchanged",
                                    code="enricher_failed")
            try:
                enriched = parse_message(as_dict, self.limits)
            except BadRequest as exc:
                raise Unprocessable(f"enricher returned an invalid message: {exc.message}",
                                    code="enricher_failed") from None
            enriched.timestamp = message.timestamp
            enriched.given_id = message.given_id
            out.append(enriched)
        return out

    def publish(self, topic_name: str, payload: Any) -> tuple[int, dict[str, Any]]:
        """Store a single message or a batch; returns the HTTP status and body of the answer."""
        started = time.perf_counter()
        check_name(topic_name)
        messages, is_batch = self.parse_payload(payload)
        return self.answer(started, is_batch, self.append(topic_name, messages))

    def publish_body(self, topic_name: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        """:meth:`publish` for a body as sent (see :meth:`read`)."""
        started = time.perf_counter()
        check_name(topic_name)
        messages, is_batch = self.read(raw)
        return self.answer(started, is_batch, self.append(topic_name, messages))

    def begin(self, topic_name: str, raw: bytes, then: Callable[[PendingPublish], None],
              early: Callable[[PendingPublish, list[Stored]], None] | None = None,
              teller: Teller | None = None, reply: Any = None) -> None:
        """:meth:`publish_body` without waiting: validate and queue for the writer, which calls
        ``then(pending)`` on its thread once the publish committed or failed; :meth:`finish` makes
        the answer. Only for a topic :meth:`answers_inline`. ``early``, ``teller`` and ``reply``:
        see :class:`PendingPublish`.

        Raises:
            BrokerError: the body is refused (nothing was queued).
        """
        started = time.perf_counter()
        messages, is_batch = self.read(raw)
        self.appender.enqueue(self.topics.get(topic_name), messages,
                              PendingPublish(started, is_batch, then, early, teller, reply))

    def answers_inline(self, topic_name: str) -> bool:
        """Whether a publish to ``topic_name`` can be taken without blocking: the topic is known
        (no SQL to create it) and has no enrichers (no user code)."""
        return topic_name not in self.enrichers and self.topics.cached(topic_name)

    def finish(self, pending: PendingPublish) -> tuple[int, dict[str, Any]]:
        """The answer of a publish :meth:`begin` queued, once the writer told its outcome.

        Raises:
            BaseException: what the writer failed with (the store refused or is down).
        """
        if pending.error is not None:
            raise pending.error
        assert pending.stored is not None, "finish() before the writer told the outcome"
        self.settle(pending)
        return self.answer_body(pending.is_batch, pending.stored)

    def settle(self, pending: PendingPublish) -> None:
        """Count a publish :meth:`begin` queued and that committed, as it is answered."""
        stored = pending.stored
        assert stored is not None, "settle() before the writer told the outcome"
        duplicates = sum(map(_DUPLICATE, stored))
        self.metrics.publishes.settled(len(stored) - duplicates, duplicates, time.perf_counter() - pending.started)

    def answer(self, started: float, is_batch: bool, stored: list[Stored]) -> tuple[int, dict[str, Any]]:
        """The HTTP status and body of a stored publish's answer; counts the request."""
        self.metrics.publishes.answered(time.perf_counter() - started)
        return self.answer_body(is_batch, stored)

    @staticmethod
    def answer_status(is_batch: bool, stored: list[Stored]) -> int:
        """The HTTP status of the answer of a publish stored at ``stored``: 200 when nothing was new."""
        if is_batch:
            return 200 if all(s.duplicate for s in stored) else 201
        return 200 if stored[0].duplicate else 201   # a single message: no generator to make

    @staticmethod
    def answer_body(is_batch: bool, stored: list[Stored]) -> tuple[int, dict[str, Any]]:
        """The HTTP status and body of the answer of a publish stored at ``stored``."""
        status = Publisher.answer_status(is_batch, stored)
        return status, {"messages": [s.answer() for s in stored]} if is_batch else stored[0].answer()

    def append(self, topic_name: str, messages: list[NewMessage]) -> list[Stored]:
        """Enrich validated ``messages``, store them in ``topic_name`` (created on first use), count them.

        The path of every message a node stores: published over HTTP, or dead-lettered.
        """
        messages = self.enrich(topic_name, messages)
        topic = self.topics.get(topic_name, create=True)
        stored = self.appender.append(topic, messages)
        self.count(stored)
        return stored

    def count(self, stored: list[Stored]) -> None:
        """Count stored messages: new ones, and duplicates of ids stored before."""
        duplicates = sum(map(_DUPLICATE, stored))   # a bool is 0 or 1; at half a generator's cost
        self.metrics.publishes.stored(len(stored) - duplicates, duplicates)
