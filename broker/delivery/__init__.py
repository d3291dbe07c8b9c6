"""Delivery: consumer groups per topic, push and pull, dead letters, ToyMB-compatible consumption.

``install(app, node)`` adds the HTTP routes and the background services (push dispatcher, lease
reaper) to a node. All durable state is in SQL (``groups``); the services only cache it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from flask import Flask

from ..errors import Conflict, NotFound
from ..store.groups import NEVER_MS, GroupStore, Subscriber, now_ms
from .assignment import assign, partitions_by_member
from .dispatcher import Dispatcher
from .pull import Fetcher
from .reaper import Reaper

if TYPE_CHECKING:
    from ..node import Node

EXTENSION = "delivery"


class Delivery:
    """The delivery side of one node; reach it as ``node.extensions["delivery"]``."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.groups = GroupStore(node.store, assign)
        self.dispatcher = Dispatcher(node, self.groups)
        self.fetcher = Fetcher(node, self.groups)
        self.reaper = Reaper(node, self.groups, self.dispatcher.invalidate)

    def lease_until(self) -> int:
        return now_ms() + int(self.node.settings.subscriber_lease_ms)

    def register(self, topic: str, group: str, sid: str, *, mode: str, url: str | None, start: str = "latest",
                 compat: bool = False, create: bool = True) -> tuple[Subscriber, list[int]]:
        """Create or refresh a subscriber of ``group`` on ``topic`` and rebalance.

        A missing topic is created when ``create`` (the caller may publish to it), else NotFound.
        """
        partitions = self.node.topic(topic, create=create).partitions
        lease = NEVER_MS if compat and mode == "push" else self.lease_until()
        result = self.groups.register(topic, partitions, group, sid, mode=mode, url=url, compat=compat,
                                      lease_until_ms=lease, start=start,
                                      max_members=self.node.settings.max_subscribers)
        self.dispatcher.invalidate(topic, group)
        return result

    def unregister(self, topic: str, group: str, sid: str) -> None:
        """Remove a subscriber; its partitions go to the others.

        Raises:
            NotFound: no such subscriber in that group.
        """
        partitions = self.node.topic(topic).partitions
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
        lease_ms = self.node.settings.subscriber_lease_ms
        if not always and sub.lease_until_ms - now_ms() > lease_ms // 2:
            return sub
        renewed, was_expired = self.groups.renew(sub.id, self.lease_until())
        if renewed is None:
            raise NotFound(f"subscriber {sub.id!r} is not registered; register again",
                           code="subscriber_not_found")
        if was_expired:
            self.groups.rebalance(sub.topic, self.node.topic(sub.topic).partitions, sub.group)
            self.dispatcher.invalidate(sub.topic, sub.group)
        return renewed

    def describe(self, topic: str, group: str) -> dict[str, Any]:
        """The members, assignment, committed offsets and lag of a group."""
        partitions = self.node.topic(topic).partitions
        members = self.groups.members(topic, group)
        committed = self.groups.committed(topic, group)
        if not members and not committed:
            raise NotFound(f"group {group!r} of topic {topic!r} does not exist", code="group_not_found")
        assignment = self.groups.assignment(topic, group)
        ends = self.node.store.end_offsets(topic)
        held = partitions_by_member(assignment)
        rows = []
        for p in range(partitions):
            end, done = ends.get(p, 0), committed.get(p, 0)
            rows.append({"partition": p, "subscriber": assignment.get(p), "committed": done, "end": end,
                         "lag": max(0, end - done)})
        total = sum(int(r["lag"] or 0) for r in rows)
        self.node.metrics.lag.labels(topic, group).set(total)
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
        }


def install(app: Flask, node: Node) -> None:
    """Add delivery's routes and services to ``node``."""
    delivery = Delivery(node)
    node.extensions[EXTENSION] = delivery
    node.appender.listeners.append(delivery.dispatcher.on_commit)
    node.appender.listeners.append(delivery.fetcher.on_commit)
    node.appender.listeners.append(delivery.reaper.on_commit)
    node.services.append(delivery.dispatcher)
    node.services.append(delivery.reaper)
