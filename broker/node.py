"""A node: the settings, the store, the writer and the background services, wired once."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .appender import Appender
from .config import Settings
from .enrichers import TopicEnricher, load_enrichers
from .errors import BadRequest, Forbidden, NotFound
from .longpoll import LongPolls
from .metrics import Metrics
from .publish import Publisher, check_name
from .store import Store, Topic

if TYPE_CHECKING:
    from flask import Response

log = logging.getLogger(__name__)


class Service(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def node_id(name: str) -> str:
    """A stable id from the node's name, so a restarted node is the same node."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]


def _no_push_addresses(url: str) -> list[str]:
    """Until security installs the allowlist, no URL may receive pushes: closed by default."""
    raise Forbidden("no push allowlist is installed on this node", code="push_url_not_allowed")


class Node:
    """Everything one broker process owns. Build it with :func:`broker.app.create_app`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.name: str = settings.node_name
        self.id = node_id(self.name)
        self.url = settings.effective_node_url
        self.store = Store(settings.effective_database_url)
        self.metrics = Metrics()
        self.appender = Appender(self.store, max_rows=settings.commit_max_rows)
        self.enrichers: dict[str, list[TopicEnricher]] = {}
        self.publisher = Publisher(self)
        self.long_polls = LongPolls(settings.threads)
        self.services: list[Service] = []
        self.extensions: dict[str, Any] = {}
        self._topics: dict[str, Topic] = {}
        self._topics_lock = threading.Lock()
        self.started = False
        # The addresses a push URL may be connected to, or a BrokerError: security sets the
        # allowlist here. It runs at registration and for every push connection.
        self.push_addresses: Callable[[str], list[str]] = _no_push_addresses
        # Set by the cluster service: decides topic owners and forwards to them.
        self.router: Any = None

    def owner_of(self, topic: str) -> str:
        return self.name if self.router is None else str(self.router.owner_of(topic))

    def owns(self, topic: str) -> bool:
        """Whether this node sequences and dispatches ``topic`` now."""
        return self.router is None or bool(self.router.owns(topic))

    def check_push_url(self, url: str) -> None:
        """Raise a BrokerError when ``url`` may not receive pushes."""
        self.push_addresses(url)

    def forward_if_remote(self, topic: str) -> tuple[Response, int] | None:
        """None when this node owns ``topic``; otherwise the owner's answer as (Response, status)."""
        return None if self.router is None else self.router.forward_if_remote(topic)

    def start(self) -> None:
        self.store.create_schema()
        self.enrichers = load_enrichers(self.settings.enriching_topics)
        self.appender.start()
        for name in self.settings.topics:
            self.topic(check_name(name), create=True)
        for service in self.services:
            service.start()
        self.started = True
        log.info("node %s (%s) started on %s, store %s", self.name, self.id, self.url, self.store.dialect)

    def stop(self) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping %s failed", service)
        self.appender.stop()
        self.store.dispose()
        self.started = False

    def topic(self, name: str, *, create: bool = False, partitions: int | None = None) -> Topic:
        """The topic ``name``; created with ``partitions`` (default from settings) when ``create``.

        Raises:
            NotFound: it does not exist and ``create`` is false.
            BadRequest: the partition count is out of range.
        """
        cached = self._topics.get(name)
        if cached is not None:
            return cached
        topic = self.store.get_topic(name)
        if topic is None:
            if not create:
                raise NotFound(f"topic {name!r} does not exist", code="topic_not_found")
            count = partitions or self.settings.default_partitions
            if not 1 <= count <= self.settings.max_partitions:
                raise BadRequest(f"partitions must be between 1 and {self.settings.max_partitions}",
                                 code="bad_partitions")
            topic, _ = self.store.ensure_topic(name, count)
        with self._topics_lock:
            self._topics[name] = topic
        return topic
