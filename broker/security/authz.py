"""Who may call what: each request is mapped to the role and topic it needs, then checked.

Each route declares the role it needs and where its topic is (:mod:`broker.api.routes`); the
OpenAPI document lists them. A request that matches no route (an unknown path, or a method the
path does not serve) needs ``admin``. The roles: ``publish`` and ``consume`` on the topic, ``any``
role on the topic (or on some topic when there is none), ``admin``, or ``open`` (no token).

Creating a topic needs only ``publish`` because publishing creates topics on first use anyway.
``/metrics`` needs ``admin`` because its labels name every topic and group.

Answers: no or an unknown token, 401 (with ``WWW-Authenticate: Bearer``); a known token without
the role or topic, 403 ``{"error": "forbidden", "message", "role", "topic"}``.

Node-to-node calls carry ``X-ToyMB-Cluster-Token``. A correct one marks the caller as a peer
node: it passes the loopback rule, and without an ``Authorization`` header it acts as admin (a
node's own call). A forwarded client request keeps the client's ``Authorization`` header, which
is checked as usual, so forwarding never widens what a client may do. A wrong cluster token is 401.

With no tokens configured, only loopback clients (127.0.0.0/8, ::1) are served, unless
``allow_remote`` is set; others get 403. Behind a reverse proxy on the same host every client
looks local, so configure tokens there.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from flask import Request

from ..api.routes import Routes
from ..errors import Forbidden, Unauthorized, Unavailable
from ..roles import ADMIN, ANY, OPEN
from ..store import GroupRepository
from ..store.errors import STORE_ERROR
from .legacy import LegacyNetworks
from .remote import client_address
from .tokens import ADMIN_GRANT, Grant, TokenTable

log = logging.getLogger(__name__)

CLUSTER_HEADER = "X-ToyMB-Cluster-Token"


class Headers(Protocol):
    """What the checks read of a request's headers (a Flask request's, or werkzeug's EnvironHeaders)."""

    def get(self, key: str) -> str | None: ...


@dataclass(frozen=True)
class Need:
    """The role a request needs, and on which topic (None: on some topic, or not about one)."""

    role: str
    topic: str | None = None
    legacy: bool = False  # a ToyMB endpoint (admitted legacy networks may call it without a token)


# Asked for every request; parsing the address cost 20 us, and a node's clients are few addresses.
@functools.lru_cache(maxsize=1024)
def is_loopback(remote_addr: str | None) -> bool:
    """Whether a request's ``REMOTE_ADDR`` is a loopback address."""
    address = client_address(remote_addr)
    return address is not None and address.is_loopback


def _body_topic(request: Request) -> str | None:
    try:
        body = json.loads(request.get_data(cache=True) or b"null")
    except (ValueError, RecursionError):
        return None  # the handler answers the bad body with a 400
    topic = body.get("topicName") if isinstance(body, dict) else None
    return topic if isinstance(topic, str) else None


class Authorizer:
    """Decides each request. ``subscriber_topic`` maps a subscriber id to its topic (or None)."""

    def __init__(self, tokens: TokenTable, cluster_token: str, *, allow_remote: bool,
                 subscriber_topic: Callable[[str], str | None], routes: Routes,
                 legacy: LegacyNetworks | None = None) -> None:
        self.tokens = tokens
        self.legacy = legacy or LegacyNetworks(())
        self.routes = routes
        self._cluster = hashlib.sha256(cluster_token.encode("utf-8")).digest() if cluster_token else None
        self.allow_remote = allow_remote
        self.subscriber_topic = subscriber_topic

    @property
    def loopback_only(self) -> bool:
        return not self.tokens and not self.allow_remote

    def need(self, request: Request) -> Need:
        """The role and topic ``request`` needs, from its route; admin for anything not routed."""
        route = self.routes.match(request.endpoint, request.method)
        if route is None:
            return Need(ADMIN)
        path = request.view_args or {}
        topic: str | None = None
        if route.topic == "path":
            topic = str(path["topic"])
        elif route.topic == "body":
            topic = _body_topic(request)
        elif route.topic == "subscriber":
            topic = self.subscriber_topic(str(path["sid"]))
        return Need(route.role, topic, route.legacy)

    def _peer(self, headers: Headers) -> bool:
        """Whether the request carries the cluster token; 401 if it carries a wrong one."""
        presented = headers.get(CLUSTER_HEADER)
        if presented is None:
            return False
        digest = hashlib.sha256(presented.encode("utf-8")).digest()
        if self._cluster is None or not hmac.compare_digest(digest, self._cluster):
            raise Unauthorized("the cluster token is wrong", code="unauthorized")
        return True

    def _grant(self, headers: Headers) -> Grant | None:
        header = headers.get("Authorization")
        if header is None:
            return None
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'", code="unauthorized")
        grant = self.tokens.lookup(presented.strip())
        if grant is None:
            raise Unauthorized("the token is not valid", code="unauthorized")
        return grant

    def check(self, request: Request) -> Grant | None:
        """Raise Unauthorized or Forbidden unless ``request`` may proceed; returns the grant used."""
        return self.decide(self.need(request), request.headers, request.remote_addr)

    def decide(self, need: Need, headers: Headers, remote_addr: str | None) -> Grant | None:
        """Raise Unauthorized or Forbidden unless a caller with ``headers`` from ``remote_addr`` has ``need``.

        The rule of :meth:`check`, for callers that hold a WSGI environ rather than a Flask request.
        """
        peer = self._peer(headers)
        if not self.tokens:
            if not peer and not self.allow_remote and not is_loopback(remote_addr):
                legacy = self._legacy_grant(remote_addr, need)
                if legacy is not None:
                    return self._allowed(legacy, need)
                raise Forbidden("this node has no tokens configured and serves only loopback clients; "
                                "set TOYMB_TOKENS (or TOYMB_ALLOW_REMOTE)", code="forbidden",
                                limit="loopback_only")
            return ADMIN_GRANT
        if need.role == OPEN:
            return None
        grant = self._grant(headers)
        if grant is None:
            if peer:
                return ADMIN_GRANT
            grant = self._legacy_grant(remote_addr, need)
            if grant is None:
                raise Unauthorized("this endpoint needs 'Authorization: Bearer <token>'", code="unauthorized")
        return self._allowed(grant, need)

    def _legacy_grant(self, remote_addr: str | None, need: Need) -> Grant | None:
        """The grant of a token-less ToyMB client from an admitted network, on a ToyMB endpoint."""
        return self.legacy.grant_for(remote_addr) if need.legacy else None

    def _allowed(self, grant: Grant, need: Need) -> Grant:
        if need.role == ANY:
            allowed = grant.allows_any_role(need.topic)
        else:
            allowed = grant.allows(need.role, need.topic)
        if not allowed:
            raise Forbidden(_refusal(grant, need), code="forbidden", role=need.role, topic=need.topic)
        return grant


def _refusal(grant: Grant, need: Need) -> str:
    role = "any role" if need.role == ANY else f"the {need.role} role"
    if need.role == ANY or grant.has_role(need.role):
        return f"{grant.name} has {role} but not on topic {need.topic!r}"
    where = f" on topic {need.topic!r}" if need.topic is not None else ""
    return f"{grant.name} lacks {role}{where}"


def subscriber_topic_lookup(groups: GroupRepository) -> Callable[[str], str | None]:
    """Look a subscriber's topic up in the shared store (None when it does not exist).

    Closed on error: when the store cannot answer, the request is refused with 503, never let
    through as if the subscriber had no topic (which any grant with the role would pass).
    """

    def lookup(sid: str) -> str | None:
        if len(sid) > 200:
            return None
        try:
            return groups.topic_of(sid)
        except STORE_ERROR as exc:
            log.warning("authorization refused: the topic of subscriber %r cannot be read from the store (%s)",
                        sid, type(exc).__name__)
            raise Unavailable("the store cannot be reached to authorize this request") from exc

    return lookup
