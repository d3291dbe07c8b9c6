"""Security of a node: bearer tokens and roles, the loopback-only default, the push allowlist,
and the bind check of ``toymb serve``.

See :mod:`broker.security.tokens` (token format), :mod:`broker.security.authz` (which role each
endpoint needs) and :mod:`broker.security.allowlist` (push URLs).
"""

from __future__ import annotations

import ipaddress
import logging

from flask import Flask, Response, g, request

from ..config import Settings
from ..errors import BrokerError, ConfigError
from ..metrics import Metrics
from .allowlist import build as build_allowlist
from .authz import Authorizer, subscriber_topic_lookup
from .tokens import PUBLISH, parse_tokens

log = logging.getLogger(__name__)

__all__ = ["Authorizer", "build_allowlist", "caller_may_publish", "check_bind", "guard", "parse_tokens",
           "subscriber_topic_lookup"]


def guard(app: Flask, authorizer: Authorizer, metrics: Metrics, settings: Settings) -> None:
    """Check every request of ``app`` with ``authorizer`` before its handler runs."""
    failures = metrics.auth_failures

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

    for network in authorizer.legacy.entries:
        grant = network.grant
        log.warning("SECURITY: token-less ToyMB clients from %s may use the ToyMB endpoints with %s on topics %s, "
                    "and be pushed to (legacy_networks)", network.network, "+".join(sorted(grant.roles)),
                    "|".join(grant.patterns))
    if authorizer.loopback_only:
        log.warning("SECURITY: no tokens configured (TOYMB_TOKENS): node %s serves only loopback clients "
                    "(127.0.0.0/8, ::1) and pushes only to loopback URLs", settings.node_name)
    else:
        log.info("security: %d token(s), cluster token %s, push allowlist %s", len(authorizer.tokens),
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
