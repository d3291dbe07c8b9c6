"""Delivery: consumer groups per topic, push and pull, dead letters, ToyMB-compatible consumption.

:class:`Delivery` holds the push dispatcher and the lease reaper (node services) and the pull
fetcher; its routes are in :mod:`broker.delivery.api` and :mod:`broker.delivery.compat`. All
durable state is in the store (``groups``, a :class:`~broker.store.GroupRepository`); the services
only cache it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound
from ..store import NEVER_MS, Subscriber, now_ms
from .assignment import partitions_by_member
from .control import DeliveryControl
from .dispatcher import Dispatcher
from .options import PolicyCache
from .pull import Fetcher
from .reaper import Reaper

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..cluster.router import Router
    from ..config import Settings
    from ..longpoll import LongPolls
    from ..metrics import Metrics
    from ..store import GroupRepository, MessageStore
    from ..topics import Topics
    from .deadletter import DeadLetters

log = logging.getLogger(__name__)


class Delivery:
    """The delivery side of one node (``node.delivery``)."""

    def __init__(self, settings: Settings, store: MessageStore, groups: GroupRepository, topics: Topics,
                 router: Router, metrics: Metrics, long_polls: LongPolls,
                 push_addresses: Callable[[str], list[str]], dead_letters: DeadLetters) -> None:
        self.settings = settings
        self.store = store
        self.topics = topics
        self.metrics = metrics
        self.groups = groups
        self.dispatcher = Dispatcher(settings, self.groups, topics, router, store, metrics, push_addresses,
                                     dead_letters)
        self.policies = PolicyCache(self.groups.options)
        self.fetcher = Fetcher(settings, self.groups, store, metrics, long_polls, dead_letters, self.policies.get)
        self.reaper = Reaper(settings, self.groups, topics, router, metrics, self.dispatcher.invalidate)
        self.control = DeliveryControl(self.groups, topics, store, self.dispatcher, self.fetcher, self.policies)

    def on_commit(self, topic: str, partitions: set[int]) -> None:
        """Appender listener: the dispatcher, the waiting fetches and the lag gauge hear of new rows."""
        self.dispatcher.on_commit(topic, partitions)
        self.fetcher.on_commit(topic, partitions)
        self.reaper.on_commit(topic, partitions)

    def lease_until(self) -> int:
        return now_ms() + int(self.settings.subscriber_lease_ms)

    def register(self, topic: str, group: str, sid: str, *, mode: str, url: str | None, start: str = "latest",
                 compat: bool = False, create: bool = True) -> tuple[Subscriber, list[int]]:
        """Create or refresh a subscriber of ``group`` on ``topic`` and rebalance.

        A missing topic is created when ``create`` (the caller may publish to it), else NotFound.
        """
        partitions = self.topics.get(topic, create=create).partitions
        lease = NEVER_MS if compat and mode == "push" else self.lease_until()
        if compat and mode == "push":
            self._take_over_address(topic, partitions, group, sid, url)
        result = self.groups.register(topic, partitions, group, sid, mode=mode, url=url, compat=compat,
                                      lease_until_ms=lease, start=start,
                                      max_members=self.settings.max_subscribers)
        self.dispatcher.invalidate(topic, group)
        return result

    def _take_over_address(self, topic: str, partitions: int, group: str, sid: str, url: str | None) -> None:
        """Remove the group's earlier ToyMB push subscribers at ``url``: the same receiver, restarted.

        ToyMB's driver registers a fresh id at every start and never unsubscribes, and its receiver
        answers 500 for an id it does not know. Left in place, the earlier id would keep its
        partitions, and their pushes would fail until dead-lettered.
        """
        for member in self.groups.members(topic, group):
            if member.compat and member.url == url and member.id != sid:
                self.groups.remove(topic, partitions, group, member.id)
                log.info("ToyMB subscriber %s of %s/%s re-registered at %s as %s: the earlier id is removed",
                         member.id, topic, group, url, sid)

    def unregister(self, topic: str, group: str, sid: str) -> None:
        """Remove a subscriber; its partitions go to the others.

        Raises:
            NotFound: no such subscriber in that group.
        """
        partitions = self.topics.get(topic).partitions
        if not self.groups.remove(topic, partitions, group, sid):
            raise NotFound(f"subscriber {sid!r} is not in group {group!r} of topic {topic!r}",
                           code="subscriber_not_found")
        self.dispatcher.invalidate(topic, group)

    def subscriber(self, sid: str) -> Subscriber:
        sub = self.groups.get(sid)
        if sub is None:
            raise NotFound(f"subscriber {sid!r} is not registered; register again",
                           code="subscriber_not_found")
        return sub

    def touch(self, sub: Subscriber, *, always: bool = False) -> Subscriber:
        """Renew the lease (once half of it is gone, or ``always``); an expired subscriber rejoins."""
        if sub.revoked:
            raise Conflict(f"subscriber {sub.id!r} kept failing and lost its lease; register again",
                           code="lease_revoked")
        lease_ms = self.settings.subscriber_lease_ms
        if not always and sub.lease_until_ms - now_ms() > lease_ms // 2:
            return sub
        renewed, was_expired = self.groups.renew(sub.id, self.lease_until())
        if renewed is None:
            raise NotFound(f"subscriber {sub.id!r} is not registered; register again",
                           code="subscriber_not_found")
        if was_expired:
            self.groups.rebalance(sub.topic, self.topics.get(sub.topic).partitions, sub.group)
            self.dispatcher.invalidate(sub.topic, sub.group)
        return renewed

    def describe(self, topic: str, group: str) -> dict[str, Any]:
        """The members, assignment, committed offsets and lag of a group."""
        partitions = self.topics.get(topic).partitions
        members = self.groups.members(topic, group)
        committed = self.groups.committed(topic, group)
        if not members and not committed:
            raise NotFound(f"group {group!r} of topic {topic!r} does not exist", code="group_not_found")
        assignment = self.groups.assignment(topic, group)
        ends = self.store.end_offsets(topic)
        held = partitions_by_member(assignment)
        rows = []
        for p in range(partitions):
            end, done = ends.get(p, 0), committed.get(p, 0)
            rows.append({"partition": p, "subscriber": assignment.get(p), "committed": done, "end": end,
                         "lag": max(0, end - done)})
        total = sum(int(r["lag"] or 0) for r in rows)
        self.metrics.lag.labels(topic, group).set(total)
        return {
            "topic": topic, "group": group,
            "subscribers": [m.to_json(held.get(m.id, [])) for m in members],
            "assignment": {str(p): s for p, s in sorted(assignment.items())},
            "committed": {str(r["partition"]): r["committed"] for r in rows},
            "end_offsets": {str(r["partition"]): r["end"] for r in rows},
            "lag": {str(r["partition"]): r["lag"] for r in rows},
            "total_lag": total,
            "partitions": rows,
            "checked_ms": int(time.time() * 1000),
            **self.policies.get(topic, group).to_json(),  # its filter and dead-letter policy, if any
        }
