"""A node: every component of one broker process, built and wired by :func:`broker.app.create_app`."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from .appender import Appender
from .cluster.membership import Membership
from .cluster.router import Router
from .config import Settings
from .delivery import Delivery
from .longpoll import LongPolls
from .metrics import Metrics
from .publish import Publisher, check_name
from .store import JournalRepository, MessageStore, Topic
from .topics import Topics

if TYPE_CHECKING:
    from flask import Response

    from .retention import Retention

log = logging.getLogger(__name__)


class Service(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def node_id(name: str) -> str:
    """A stable id from the node's name, so a restarted node is the same node."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]


class Node:
    """Everything one broker process owns. Build it with :func:`broker.app.create_app`."""

    def __init__(self, settings: Settings, *, store: MessageStore, metrics: Metrics, long_polls: LongPolls,
                 topics: Topics, appender: Appender, publisher: Publisher, membership: Membership,
                 router: Router, delivery: Delivery, retention: Retention | None,
                 push_addresses: Callable[[str], list[str]], services: Sequence[Service],
                 journal: JournalRepository | None = None) -> None:
        self.settings = settings
        self.name = settings.node_name
        self.id = node_id(self.name)
        self.url = settings.effective_node_url
        self.store = store
        self.metrics = metrics
        self.long_polls = long_polls
        self.topics = topics
        self.appender = appender
        self.publisher = publisher
        self.membership = membership
        self.router = router
        self.delivery = delivery
        self.retention = retention
        # The journal's offsets in the shared store (read by the console), on the same pool.
        self.journal = journal
        # The addresses a push URL may be connected to, or a BrokerError (the push allowlist). It
        # runs at registration and for every push connection.
        self.push_addresses = push_addresses
        self.services = tuple(services)
        self.started = False

    def owner_of(self, topic: str) -> str:
        return self.router.owner_of(topic)

    def owns(self, topic: str) -> bool:
        """Whether this node sequences and dispatches ``topic`` now."""
        return self.router.owns(topic)

    def check_push_url(self, url: str) -> None:
        """Raise a BrokerError when ``url`` may not receive pushes."""
        self.push_addresses(url)

    def forward_if_remote(self, topic: str) -> tuple[Response, int] | None:
        """None when this node owns ``topic``; otherwise the owner's answer as (Response, status)."""
        return self.router.forward_if_remote(topic)

    def topic(self, name: str, *, create: bool = False, partitions: int | None = None) -> Topic:
        """The topic ``name`` (see :meth:`broker.topics.Topics.get`)."""
        return self.topics.get(name, create=create, partitions=partitions)

    def start(self) -> None:
        self.store.create_schema()
        self.publisher.load_enrichers()
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
