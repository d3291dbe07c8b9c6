"""Routing decided once per broker topic, as far as the predicates allow.

A bridge routes every journaled message, and most routes test ``msg.address`` alone (or test it
first, ``msg.address==shop && ...``). For one broker topic, each predicate is then known to hold,
known not to hold, or to depend on the message (:meth:`Compare.on_address`). A :class:`TopicPlan`
keeps the routes of the last kind that come before the first route known to hold; a message is
tested against those only, and takes that route if none matches. The route chosen is the one
:meth:`Routes.first_match` chooses, for every message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .routes import Route, Routes


@dataclass(frozen=True)
class TopicPlan:
    """How the messages of one broker topic are routed."""

    tests: tuple[Route, ...]    # routes (file order) whose predicate depends on more than the address
    fallback: Route | None      # the first route that takes every message of the topic, if any

    def route(self, row: Any) -> Route | None:
        """The first route (file order) whose predicate holds for ``row``, or None."""
        for route in self.tests:
            if route.predicate(row):
                return route
        return self.fallback


def plan_for_topic(routes: Routes, topic: str) -> TopicPlan:
    """The :class:`TopicPlan` of broker topic ``topic``."""
    tests: list[Route] = []
    for route in routes.routes:
        holds = route.predicate.on_address(topic)
        if holds is None:
            tests.append(route)
        elif holds:
            return TopicPlan(tuple(tests), route)
    return TopicPlan(tuple(tests), None)
