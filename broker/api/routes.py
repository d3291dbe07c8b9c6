"""The route table: every endpoint declared once, with what authorization, forwarding and the
OpenAPI document need to know about it.

A module declares its endpoints on a :class:`RouteTable` (as it would on a Flask blueprint)::

    routes = RouteTable("topics")

    @routes.add("POST", "/v1/topics/<topic>/messages", role=PUBLISH, topic="path", forward=True,
                summary="Publish one message or a batch", doc=publish_doc)
    def publish(topic: str) -> ...

From that one declaration:

- :meth:`RouteTable.blueprint` registers the handler with Flask, and when ``forward`` is set the
  request goes to the topic's owner before the handler runs (the handler never sees it then);
- :mod:`broker.security.authz` looks the matched route up to know the role and topic it needs;
- :mod:`broker.api.openapi` describes the route from its method, path, role and ``doc``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from flask import Blueprint

from ..config import Settings
from ..roles import ADMIN, ANY, CONSUME, OPEN, PUBLISH

__all__ = ["ADMIN", "ANY", "CONSUME", "OPEN", "PUBLISH", "Route", "RouteTable", "Routes", "TopicFrom"]

# Where a request's topic is: a ``<topic>`` path part, the ``topicName`` of a JSON body, or the
# topic of the ``<sid>`` subscriber in the path. None: the route is not about one topic.
TopicFrom = Literal["path", "body", "subscriber"] | None
# The OpenAPI operation of a route, minus what the table knows (summary, path parameters, security).
OperationDoc = Callable[[Settings], dict[str, Any]]
# Finds the topic of a request for forwarding: (route, the path's arguments) -> topic name.
TopicResolver = Callable[["Route", dict[str, Any]], str]
# Forwards a request to the owner of a topic: the owner's answer, or None when this node owns it.
Forward = Callable[[str], Any]


@dataclass(frozen=True)
class Route:
    """One endpoint: method and Flask path rule, its handler, and what it needs."""

    method: str
    rule: str
    handler: Callable[..., Any]
    endpoint: str
    role: str
    topic: TopicFrom = None
    forward: bool = False
    summary: str = ""
    doc: OperationDoc | None = None
    # A ToyMB endpoint: clients of an admitted legacy network may call it without a token.
    legacy: bool = False

    @property
    def openapi_path(self) -> str:
        """The rule as an OpenAPI path: ``<topic>`` becomes ``{topic}``."""
        return self.rule.replace("<", "{").replace(">", "}")


@dataclass
class RouteTable:
    """The routes of one resource; it becomes one Flask blueprint."""

    name: str
    routes: list[Route] = field(default_factory=list)

    def add(self, method: str, rule: str, *, role: str, topic: TopicFrom = None, forward: bool = False,
            summary: str = "", doc: OperationDoc | None = None, legacy: bool = False,
            ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Declare the decorated function as the handler of ``method rule``."""
        if role not in (OPEN, PUBLISH, CONSUME, ANY, ADMIN):
            raise ValueError(f"unknown role {role!r}")
        if forward and topic is None:
            raise ValueError(f"{method} {rule}: only a route about one topic can be forwarded to its owner")

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            self.routes.append(Route(method, rule, handler, f"{self.name}.{handler.__name__}", role, topic,
                                     forward, summary, doc, legacy))
            return handler

        return register

    def blueprint(self, forward: Forward, topic_of: TopicResolver) -> Blueprint:
        """A blueprint serving these routes; forwarded routes ask ``forward`` first."""
        bp = Blueprint(self.name, self.name)
        for route in self.routes:
            view = _forwarding(route, forward, topic_of) if route.forward else route.handler
            bp.add_url_rule(route.rule, endpoint=route.handler.__name__, view_func=view, methods=[route.method])
        return bp


def _forwarding(route: Route, forward: Forward, topic_of: TopicResolver) -> Callable[..., Any]:
    @functools.wraps(route.handler)
    def view(**path: Any) -> Any:
        answer = forward(topic_of(route, path))
        return answer if answer is not None else route.handler(**path)

    return view


class Routes:
    """Every route of a node, looked up by Flask endpoint."""

    def __init__(self, tables: Iterable[RouteTable]) -> None:
        self._by_endpoint: dict[str, Route] = {}
        for table in tables:
            for route in table.routes:
                if route.endpoint in self._by_endpoint:
                    raise ValueError(f"endpoint {route.endpoint} is declared twice")
                self._by_endpoint[route.endpoint] = route

    def __iter__(self) -> Iterator[Route]:
        return iter(self._by_endpoint.values())

    def match(self, endpoint: str | None, method: str) -> Route | None:
        """The route Flask matched for ``endpoint``, if it serves ``method`` (HEAD as GET)."""
        route = self._by_endpoint.get(endpoint or "")
        if route is None:
            return None
        wanted = "GET" if method == "HEAD" else method
        return route if route.method == wanted else None
