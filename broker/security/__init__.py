"""Security of a node: bearer tokens and roles, the loopback-only default, the push allowlist,
and the bind check of ``toymb serve``.

See :mod:`broker.security.tokens` (token format), :mod:`broker.security.authz` (which role each
endpoint needs) and :mod:`broker.security.allowlist` (push URLs).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from flask import Flask, Response, g, request

from ..api import ROUTES_EXTENSION
from ..config import Settings
from ..errors import BrokerError, ConfigError
from .allowlist import build as build_allowlist
from .authz import Authorizer, subscriber_topic_lookup
from .tokens import PUBLISH, parse_tokens

log = logging.getLogger(__name__)

__all__ = ["install", "check_bind"]


def install(app: Flask, node: Any) -> None:
    """Guard every request of ``app`` and add the push allowlist and ``/openapi.json`` to ``node``.

    Raises:
        ConfigError: the ``tokens`` or ``push_allow`` setting is malformed.
    """
    settings = node.settings
    tokens = parse_tokens(settings.tokens)
    authorizer = Authorizer(tokens, settings.cluster_token, allow_remote=settings.allow_remote,
                            subscriber_topic=subscriber_topic_lookup(node.extensions["delivery"].groups),
                            routes=app.extensions[ROUTES_EXTENSION])
    allowlist = build_allowlist(settings.push_allow, loopback_only=authorizer.loopback_only)
    node.push_addresses = allowlist.addresses
    node.extensions["security"] = authorizer
    failures = node.metrics.auth_failures

    @app.before_request
    def authorize() -> None:
        try:
            g.toymb_grant = authorizer.check(request)
        except BrokerError as exc:
            failures.labels(str(exc.status)).inc()
            raise

    @app.after_request
    def challenge(response: Response) -> Response:
        if response.status_code == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="toymb"'
        return response

    if authorizer.loopback_only:
        log.warning("SECURITY: no tokens configured (TOYMB_TOKENS): node %s serves only loopback clients "
                    "(127.0.0.0/8, ::1) and pushes only to loopback URLs", node.name)
    else:
        log.info("security: %d token(s), cluster token %s, push allowlist %s", len(tokens),
                 "set" if settings.cluster_token else "unset", ", ".join(settings.push_allow) or "empty")


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse to bind a non-loopback address when nothing protects the node.

    Raises:
        ConfigError: ``host`` is not loopback and neither ``tokens`` nor ``allow_remote`` is set.
    """
    if _is_loopback_host(str(settings.host)) or settings.tokens or settings.allow_remote:
        return
    raise ConfigError(f"refusing to bind {settings.host}: no tokens are configured, so anyone who can "
                      "reach it could publish and read every topic. Set TOYMB_TOKENS, or "
                      "TOYMB_ALLOW_REMOTE=true to serve remote clients without tokens")


def caller_may_publish(topic: str) -> bool:
    """Whether the current request's caller may publish to ``topic``, and so create it.

    True when security is not installed, or the request was let in without a grant.
    """
    grant = g.get("toymb_grant")
    return grant is None or bool(grant.allows(PUBLISH, topic))
