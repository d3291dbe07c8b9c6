"""One-hop forwarding of a client's request to the topic's owner.

The forwarded copy carries ``X-ToyMB-Forwarded: <this node>``. A node that receives a forwarded
request for a topic it does not own answers 503 ``not_owner`` naming the owner it sees, and never
forwards again, so a request makes at most one hop whatever the nodes believe. The client gets
exactly one answer: the owner's status and body, relayed as they are.

A forwarded long poll (``wait_ms`` > 0) holds a thread here while the owner waits, so it takes a
slot of this node's :class:`~broker.longpoll.LongPolls`, like the owner's own waiting fetches.
Past the cap it is forwarded with ``wait_ms=0``: the owner answers at once with what it has.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import requests
from flask import Response, request
from requests.adapters import HTTPAdapter

from ..errors import Unavailable
from ..longpoll import LongPolls

log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-ToyMB-Forwarded"
FORWARDED_TO_HEADER = "X-ToyMB-Forwarded-To"
CLUSTER_TOKEN_HEADER = "X-ToyMB-Cluster-Token"
# Request headers that travel with a forwarded request; everything else is hop-by-hop or ours.
_PASS_REQUEST = ("Authorization", "Content-Type", "Accept", "X-Request-Id")
_PASS_RESPONSE = ("Content-Type", "Retry-After", "Location")


def is_forwarded() -> bool:
    """Whether the current request was forwarded by another node."""
    return FORWARDED_HEADER in request.headers


class Forwarder:
    """Relays the current Flask request to another node and returns its answer."""

    def __init__(self, settings: Any, metrics: Any, node_name: str, long_polls: LongPolls) -> None:
        self.settings = settings
        self.long_polls = long_polls
        self.metrics = metrics
        self.node_name = node_name
        self._local = threading.local()

    def _session(self) -> requests.Session:
        # One session per worker thread: pooled keep-alive connections without sharing a Session.
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.mount("http://", HTTPAdapter(pool_connections=8, pool_maxsize=8, max_retries=0))
            session.mount("https://", HTTPAdapter(pool_connections=8, pool_maxsize=8, max_retries=0))
            session.trust_env = False  # never route node-to-node calls through an HTTP proxy
            self._local.session = session
        return session

    def wait_ms(self) -> int:
        """The long-poll wait the current request asks for, within ``max_wait_ms`` (0: none)."""
        try:
            wait_ms = int(request.args.get("wait_ms", "0"))
        except ValueError:
            wait_ms = 0
        return min(max(wait_ms, 0), int(self.settings.max_wait_ms))

    def forward(self, owner: str, owner_url: str) -> tuple[Response, int]:
        """Send the current request to ``owner`` and return its answer as ``(Response, status)``.

        Raises:
            Unavailable: the owner could not be reached (503, retryable; names the owner).
        """
        headers = {name: request.headers[name] for name in _PASS_REQUEST if name in request.headers}
        headers[FORWARDED_HEADER] = self.node_name
        if self.settings.cluster_token:
            headers[CLUSTER_TOKEN_HEADER] = self.settings.cluster_token
        url = owner_url.rstrip("/") + request.path
        params = request.args.to_dict(flat=False)
        wait_ms = self.wait_ms()
        holding = wait_ms > 0 and self.long_polls.try_hold()
        if wait_ms > 0 and not holding:
            params["wait_ms"] = ["0"]  # too many long polls wait here already: no waiting
            wait_ms = 0
        self.metrics.forwards.inc()
        try:
            answer = self._session().request(
                request.method, url, params=params or None, data=request.get_data(cache=True),
                headers=headers, timeout=float(self.settings.forward_timeout_ms + wait_ms) / 1000.0,
                allow_redirects=False)
        except requests.RequestException as exc:
            log.info("forward of %s %s to %s failed: %s", request.method, request.path, owner, exc)
            raise Unavailable(f"the topic's owner {owner} cannot be reached now; retry",
                              code="owner_unavailable", owner=owner) from None
        finally:
            if holding:
                self.long_polls.release()
        response = Response(answer.content, status=answer.status_code)
        for name in _PASS_RESPONSE:
            if name in answer.headers:
                response.headers[name] = answer.headers[name]
        response.headers[FORWARDED_TO_HEADER] = owner
        return response, answer.status_code
