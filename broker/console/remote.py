"""What the console learns from processes beside the node: bridges and the journal job.

The node calls only the addresses configured for it (``console_bridges``, ``console_journal_metrics``),
never one taken from a request, so the console cannot be turned into a way to reach other hosts.
A request names a bridge endpoint by its configured *name*, and a bridge by a checked name, and
only ``pause`` and ``resume`` are relayed.

Answers are read up to :data:`MAX_ANSWER_BYTES`, with short timeouts, and kept for
:data:`CACHE_S` so that several open consoles cost the bridges one call per period. Nothing a
remote answers reaches the page unchecked: only known fields of expected types are kept.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from ..errors import BadRequest, NotFound, Unavailable
from .promtext import journal_health

MAX_ANSWER_BYTES = 1 << 20
READ_TIMEOUT_S = 1.5
ACTION_TIMEOUT_S = 10.0
CACHE_S = 1.0
MAX_BRIDGES = 200          # per endpoint: more are not shown
MAX_TEXT = 500             # longest string kept from a remote answer
ACTIONS = ("pause", "resume")
BRIDGE_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


class RemoteError(Exception):
    """A remote answered badly or not at all (the message says how, for the page)."""


@dataclass(frozen=True)
class Endpoint:
    """A configured bridge management API: its name in the console, and its base URL."""

    name: str
    url: str


def parse_endpoints(items: tuple[str, ...]) -> dict[str, Endpoint]:
    """``NAME=URL`` items (checked at startup by :mod:`broker.config`) by name."""
    endpoints: dict[str, Endpoint] = {}
    for item in items:
        name, _, url = item.partition("=")
        endpoints[name] = Endpoint(name, url.rstrip("/"))
    return endpoints


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def clean_bridge(raw: Any) -> dict[str, Any] | None:
    """The fields of a bridge's status the console shows, or None when it is not a bridge status."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not BRIDGE_NAME.fullmatch(raw["name"]):
        return None
    counts = {k: v for k, v in raw.items() if _count(v) is not None and len(k) <= 64}
    nested = raw.get("counts")
    if isinstance(nested, dict):
        counts.update({k: v for k, v in nested.items() if isinstance(k, str) and len(k) <= 64
                       and _count(v) is not None})
    return {"name": raw["name"], "kind": _text(raw.get("kind")) or "bridge",
            "state": _text(raw.get("state")) or "UNKNOWN", "last_error": _text(raw.get("last_error")),
            "counts": dict(sorted(counts.items())[:32])}


class _Cache:
    """One value per key, computed at most once per ``CACHE_S`` (callers meanwhile share it)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and time.monotonic() - hit[0] < CACHE_S:
                return hit[1]
            value = compute()
            self._values[key] = (time.monotonic(), value)
            return value

    def drop(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)


class Remotes:
    """The bridges and journal job a node's console shows."""

    def __init__(self, bridge_endpoints: tuple[str, ...], journal_metrics_url: str) -> None:
        self.endpoints = parse_endpoints(bridge_endpoints)
        self.journal_metrics_url = journal_metrics_url
        self._cache = _Cache()
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False   # no proxy from the environment: straight to the configured address
            session.mount("http://", HTTPAdapter(max_retries=0))
            session.mount("https://", HTTPAdapter(max_retries=0))
            self._local.session = session
        return session

    def _call(self, method: str, url: str, timeout: float,
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        try:
            with self._session().request(method, url, timeout=timeout, stream=True, allow_redirects=False,
                                         headers=headers) as answer:
                body = answer.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
                if len(body) > MAX_ANSWER_BYTES:
                    raise RemoteError(f"answered more than {MAX_ANSWER_BYTES} bytes")
                return answer.status_code, body
        except requests.RequestException as exc:
            raise RemoteError(f"unreachable ({type(exc).__name__})") from None

    def _json(self, method: str, url: str, timeout: float,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
        status, body = self._call(method, url, timeout, headers)
        try:
            return status, json.loads(body)
        except (ValueError, RecursionError):
            raise RemoteError(f"answered {status} with a body that is not JSON") from None

    def get_json(self, url: str, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
        """GET ``url`` (an address the caller vouches for): its status and JSON body, read with the caps.

        Raises:
            RemoteError: unreachable, too large, or not JSON.
        """
        return self._json("GET", url, timeout, headers)

    # -- bridges ----------------------------------------------------------------------------------

    def bridges(self) -> list[dict[str, Any]]:
        """Every configured endpoint with its bridges' status, or why they could not be read."""
        return [self._cache.get(f"bridges:{e.name}", lambda e=e: self._read_endpoint(e))  # type: ignore[misc]
                for e in self.endpoints.values()]

    def _read_endpoint(self, endpoint: Endpoint) -> dict[str, Any]:
        view: dict[str, Any] = {"endpoint": endpoint.name, "url": endpoint.url, "reachable": False,
                                "error": None, "bridges": []}
        try:
            status, body = self._json("GET", endpoint.url + "/bridges", READ_TIMEOUT_S)
        except RemoteError as exc:
            view["error"] = str(exc)
            return view
        raw = body.get("bridges") if isinstance(body, dict) else None
        if status != 200 or not isinstance(raw, list):
            view["error"] = f"answered {status} without a bridge list"
            return view
        view["reachable"] = True
        view["bridges"] = [b for b in (clean_bridge(r) for r in raw[:MAX_BRIDGES]) if b is not None]
        return view

    def act(self, endpoint_name: str, bridge: str, action: str) -> dict[str, Any]:
        """Pause or resume ``bridge`` at the configured endpoint ``endpoint_name``; its new status.

        Raises:
            NotFound: no endpoint of that name is configured, or it has no such bridge.
            BadRequest: the action is not pause or resume, or the bridge name is malformed.
            Unavailable: the endpoint cannot be reached or answered badly.
        """
        endpoint = self.endpoints.get(endpoint_name)
        if endpoint is None:
            raise NotFound(f"no bridge endpoint named {endpoint_name[:80]!r} is configured (console_bridges)",
                           code="bridge_endpoint_not_found")
        if action not in ACTIONS:
            raise BadRequest(f"action must be one of {', '.join(ACTIONS)}", code="bad_action")
        if not BRIDGE_NAME.fullmatch(bridge):
            raise BadRequest("a bridge name is letters, digits and ._- (1 to 200)", code="bad_bridge_name")
        url = f"{endpoint.url}/bridges/{quote(bridge, safe='')}/{action}"
        try:
            status, body = self._json("POST", url, ACTION_TIMEOUT_S)
        except RemoteError as exc:
            raise Unavailable(f"bridge endpoint {endpoint.name} {exc}", code="bridge_unavailable") from None
        finally:
            self._cache.drop(f"bridges:{endpoint.name}")
        if status == 404:
            raise NotFound(f"{endpoint.name} has no bridge named {bridge!r}", code="bridge_not_found")
        cleaned = clean_bridge(body)
        if status != 200 or cleaned is None:
            raise Unavailable(f"bridge endpoint {endpoint.name} answered {status} to {action}",
                              code="bridge_unavailable")
        return cleaned

    # -- journal ----------------------------------------------------------------------------------

    def journal(self) -> dict[str, Any] | None:
        """The journal job's health from its metrics, or None when no address is configured."""
        if not self.journal_metrics_url:
            return None
        return self._cache.get("journal", self._read_journal)  # type: ignore[no-any-return]

    def _read_journal(self) -> dict[str, Any]:
        view: dict[str, Any] = {"url": self.journal_metrics_url, "reachable": False, "error": None}
        try:
            status, body = self._call("GET", self.journal_metrics_url, READ_TIMEOUT_S)
        except RemoteError as exc:
            view["error"] = str(exc)
            return view
        if status != 200:
            view["error"] = f"answered {status}"
            return view
        view["reachable"] = True
        view.update(journal_health(body.decode("utf-8", errors="replace")))
        return view
