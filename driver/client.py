"""``Template`` (alias ``Client``): publishing and the subscriber calls, over a list of nodes.

Every call has a timeout and fails over: on a refused connection, a timeout or a 503 it tries the
next node URL. Publishing is safe to retry because the driver gives every message its id before
the first attempt, and a node answers a known id with the original coordinates instead of storing
it again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from . import config
from .errors import (
    ConfigurationError,
    ConnectError,
    HTTPStatusError,
    NotFound,
    RequestTimeout,
    SerializationError,
    TransportError,
    from_response,
)
from .message import Message, encode_body

log = logging.getLogger(__name__)

Timeout = float | tuple[float, float]
#: The most messages the driver puts in one publish request (the broker's default limit is 1000).
MAX_BATCH = 500
_USER_AGENT = "toymb-driver/0.1"
_RETRYABLE = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


@dataclass(frozen=True)
class Coordinates:
    """Where a published message was stored. ``duplicate`` is true when the id was already there."""

    id: str
    topic: str
    partition: int
    offset: int
    duplicate: bool = False

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Coordinates:
        return cls(id=str(body["id"]), topic=str(body["topic"]), partition=int(body["partition"]),
                   offset=int(body["offset"]), duplicate=bool(body.get("duplicate", False)))


@dataclass(frozen=True)
class Outgoing:
    """One message of :meth:`Template.send_batch`; a ``(key, message[, headers])`` tuple also works."""

    key: str | None
    message: Any
    headers: Mapping[str, str] | None = None
    id: str | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Registered:
    """The broker's answer to a subscriber registration."""

    subscriber_id: str
    partitions: tuple[int, ...]
    raw: Mapping[str, Any]


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


class Template:
    """Publishes messages and talks to the subscriber API of a ToyMB cluster.

    Parameters:
        urls: node URLs, as a list or a comma-separated string. Default: ``TOYMB_URLS``, else
            ``http://127.0.0.1:8080``.
        token: bearer token. Default: ``TOYMB_TOKEN``.
        timeout: seconds, or ``(connect, read)`` seconds, for every call.
        retries: extra attempts after every URL has been tried once.
        backoff: first pause, in seconds, between rounds over the URLs; it doubles each round.
        session: a ``requests.Session`` to use (a pooled one is made otherwise).

    A Template is thread-safe and meant to be shared; close it (or use ``with``) to free its pool.
    """

    def __init__(self, urls: str | Sequence[str] | None = None, *, token: str | None = None,
                 timeout: Timeout = config.DEFAULT_TIMEOUT, retries: int = 2, backoff: float = 0.1,
                 session: requests.Session | None = None) -> None:
        try:
            self.urls = config.node_urls(urls if urls is None or isinstance(urls, str) else list(urls))
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self._own_session = session is None
        self.session = session or requests.Session()
        if self._own_session:
            adapter = HTTPAdapter(pool_connections=len(self.urls), pool_maxsize=32)
            self.session.mount("http://", adapter)
            self.session.mount("https://", adapter)
        self.session.headers.setdefault("User-Agent", _USER_AGENT)
        token = token or config.env("TOYMB_TOKEN")
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._preferred = 0
        self._lock = threading.Lock()

    @property
    def current_url(self) -> str:
        """The node URL the next call tries first: the last one that answered."""
        with self._lock:
            return self.urls[self._preferred]

    # -- plumbing -------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, payload: Any = None, params: Mapping[str, Any] | None = None,
                timeout: Timeout | None = None) -> requests.Response:
        """Send one call with failover; return the 2xx response.

        Raises:
            HTTPStatusError: a node answered with an error (a 503 only once every node did).
            ConnectError: no node could be reached.
            RequestTimeout: the last node tried did not answer in time.
        """
        data = None
        headers = {}
        if payload is not None:
            try:
                data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise SerializationError(f"cannot send as JSON: {exc}") from None
            headers["Content-Type"] = "application/json"
        n = len(self.urls)
        with self._lock:
            first = self._preferred
        errors: list[str] = []
        last_503: requests.Response | None = None
        timed_out = False
        for attempt in range(n + self.retries):
            if attempt >= n and attempt % n == 0:
                time.sleep(min(self.backoff * 2 ** (attempt // n - 1), 2.0))
            index = (first + attempt) % n
            url = self.urls[index] + path
            try:
                response = self.session.request(method, url, data=data, params=params, headers=headers,
                                                timeout=timeout or self.timeout)
            except _RETRYABLE as exc:
                # A ConnectTimeout is both; the request never reached the node, so count it as a refusal.
                timed_out = isinstance(exc, requests.Timeout) and not isinstance(exc, requests.ConnectTimeout)
                errors.append(f"{method} {url}: {type(exc).__name__}: {exc}")
                log.warning("toymb: %s %s failed (%s), trying the next node", method, url, type(exc).__name__)
                continue
            if response.status_code == 503:
                last_503 = response
                errors.append(f"{method} {url}: 503 {response.text[:200]}")
                log.warning("toymb: %s %s answered 503, trying the next node", method, url)
                continue
            with self._lock:
                self._preferred = index
            if response.status_code >= 400:
                raise from_response(response)
            return response
        if last_503 is not None and not timed_out:
            error = from_response(last_503)
            error.details.setdefault("attempts", errors)
            raise error
        cls: type[TransportError] = RequestTimeout if timed_out else ConnectError
        raise cls(f"no ToyMB node answered {method} {path} after {len(errors)} attempts: "
                  + "; ".join(errors[-3:]), errors=errors)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:
            raise HTTPStatusError(f"{method} {path}: the node answered {response.status_code} without JSON",
                                  response=response) from None

    def close(self) -> None:
        """Release pooled connections (only when the Template made its own session)."""
        if self._own_session:
            self.session.close()

    def __enter__(self) -> Template:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Template(urls={self.urls!r})"

    # -- publishing -----------------------------------------------------------------------------

    @staticmethod
    def _outgoing(key: str | None, message: Any, headers: Mapping[str, str] | None, msg_id: str | None,
                  content_type: str | None) -> dict[str, Any]:
        item: dict[str, Any] = {"id": msg_id or uuid.uuid4().hex, **encode_body(message, content_type)}
        if key is not None:
            item["key"] = key
        if headers:
            item["headers"] = dict(headers)
        return item

    def send(self, topic: str, key: str | None, message: Any, headers: Mapping[str, str] | None = None, *,
             id: str | None = None, content_type: str | None = None) -> Coordinates:
        """Publish one message and return where it was stored.

        Parameters:
            topic: the topic (created on first use).
            key: messages with the same key go to the same partition, in order; None spreads them.
            message: ``bytes`` (binary), ``str`` (text) or any JSON-serialisable value.
            headers: string headers.
            id: the message id; a random one by default. Sending an id again stores nothing.
            content_type: overrides the type chosen from the body's Python type.

        Raises:
            ToyMBError: see :mod:`driver.errors`.
        """
        body = self._outgoing(key, message, headers, id, content_type)
        answer = self._json("POST", _path("v1", "topics", topic, "messages"), payload=body)
        coordinates = Coordinates.from_json(answer)
        log.debug("toymb: sent %s to %s/%d@%d", coordinates.id, topic, coordinates.partition,
                  coordinates.offset)
        return coordinates

    def send_batch(self, topic: str, messages: Iterable[Outgoing | tuple[Any, ...]], *,
                   chunk_size: int = MAX_BATCH) -> list[Coordinates]:
        """Publish many messages, ``chunk_size`` per request, and return their coordinates in order.

        Items are :class:`Outgoing` or ``(key, message)`` / ``(key, message, headers)`` tuples. If a
        request fails, the chunks before it are stored and the exception is raised.
        """
        if not 1 <= chunk_size <= 1000:
            raise ValueError("chunk_size must be between 1 and 1000")
        stored: list[Coordinates] = []
        for chunk in _chunks(messages, chunk_size):
            body = {"messages": [self._outgoing(o.key, o.message, o.headers, o.id, o.content_type)
                                 for o in chunk]}
            answer = self._json("POST", _path("v1", "topics", topic, "messages"), payload=body)
            stored.extend(Coordinates.from_json(item) for item in answer["messages"])
        return stored

    def publish_encoded(self, topic: str, messages: Sequence[Mapping[str, Any]], *,
                        timeout: Timeout | None = None) -> list[dict[str, Any]]:
        """Publish messages already in the broker's wire form (``id``, ``key``, ``headers``,
        ``content_type``, ``body`` or ``body_base64``, ``timestamp``) as one batch, and return the
        broker's answer for each: ``{id, topic, partition, offset, duplicate}``.

        For bridges and tools that move stored messages (ids and timestamps kept), where
        :meth:`send_batch` would encode the bodies again.

        Raises:
            ToyMBError: see :mod:`driver.errors`.
        """
        answer = self._json("POST", _path("v1", "topics", topic, "messages"),
                            payload={"messages": list(messages)}, timeout=timeout)
        answers: list[dict[str, Any]] = answer["messages"]
        return answers

    # -- topics and groups ----------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int | None = None) -> dict[str, Any]:
        """Create ``topic`` (idempotent for the same partition count) and return its description."""
        payload = {} if partitions is None else {"partitions": partitions}
        result: dict[str, Any] = self._json("PUT", _path("v1", "topics", topic), payload=payload)
        return result

    def topic_info(self, topic: str) -> dict[str, Any]:
        """``{name, partitions, owner, end_offsets}`` of a topic."""
        result: dict[str, Any] = self._json("GET", _path("v1", "topics", topic))
        return result

    def group_info(self, topic: str, group: str) -> dict[str, Any]:
        """The subscribers, assignment, committed offsets and lag of a group."""
        result: dict[str, Any] = self._json("GET", _path("v1", "topics", topic, "groups", group))
        return result

    # -- subscribers ----------------------------------------------------------------------------

    def register(self, topic: str, group: str, *, mode: Literal["push", "pull"], url: str | None = None,
                 subscriber_id: str | None = None, start: str | None = None,
                 **options: Any) -> Registered:
        """Register (or re-register, keeping its identity) a subscriber of ``group`` on ``topic``.

        ``options`` are the registration's delivery options, sent as given when not None: the
        group's ``filter`` and ``dead_letter`` policy; a push subscriber's ``format``, ``secret``,
        ``new_secret`` and ``secret_overlap_ms``. A secret the broker made is in ``raw["secret"]``.
        """
        payload: dict[str, Any] = {"mode": mode, **{k: v for k, v in options.items() if v is not None}}
        if url is not None:
            payload["url"] = url
        if subscriber_id is not None:
            payload["id"] = subscriber_id
        if start is not None:
            payload["start"] = start
        answer = self._json("POST", _path("v1", "topics", topic, "groups", group, "subscribers"),
                            payload=payload)
        return Registered(subscriber_id=str(answer["subscriber_id"]),
                          partitions=tuple(int(p) for p in answer.get("partitions", [])), raw=answer)

    def heartbeat(self, subscriber_id: str) -> dict[str, Any]:
        """Renew a subscriber's lease. Raises :class:`NotFound` when the broker forgot it."""
        result: dict[str, Any] = self._json("POST", _path("v1", "subscribers", subscriber_id, "heartbeat"),
                                            payload={})
        return result

    def deregister(self, topic: str, group: str, subscriber_id: str, *,
                   timeout: Timeout | None = None) -> bool:
        """Remove a subscriber so its partitions move on now; False if the broker did not know it."""
        try:
            self.request("DELETE", _path("v1", "topics", topic, "groups", group, "subscribers",
                                         subscriber_id), timeout=timeout)
        except NotFound:
            return False
        return True

    def fetch(self, topic: str, group: str, subscriber_id: str, *, max_messages: int = 100,
              wait_ms: int = 5000) -> list[Message]:
        """Long-poll for messages of the subscriber's partitions after the group's committed offsets."""
        connect, read = self.timeout if isinstance(self.timeout, tuple) else (self.timeout, self.timeout)
        answer = self._json("GET", _path("v1", "topics", topic, "groups", group, "messages"),
                            params={"subscriber": subscriber_id, "max": max_messages, "wait_ms": wait_ms},
                            timeout=(connect, read + wait_ms / 1000))
        return [Message.from_envelope(e) for e in answer.get("messages", [])]

    def commit(self, topic: str, group: str, subscriber_id: str, offsets: Mapping[int, int]) -> None:
        """Acknowledge every message up to and including ``offsets[partition]``."""
        if not offsets:
            return
        payload = {"subscriber": subscriber_id, "offsets": {str(p): o for p, o in offsets.items()}}
        self.request("POST", _path("v1", "topics", topic, "groups", group, "offsets"), payload=payload)


    def nack(self, topic: str, group: str, subscriber_id: str, positions: Iterable[tuple[int, int]]) -> list[int]:
        """Give fetched messages ``(partition, offset)`` back for redelivery now; the partitions rewound."""
        payload = {"subscriber": subscriber_id,
                   "messages": [{"partition": p, "offset": o} for p, o in positions]}
        answer = self._json("POST", _path("v1", "topics", topic, "groups", group, "nack"), payload=payload)
        return [int(p) for p in answer.get("rewound", [])]

    def extend(self, topic: str, group: str, subscriber_id: str, positions: Iterable[tuple[int, int]],
               extend_ms: int) -> list[int]:
        """Hold back redelivery of fetched messages for ``extend_ms`` from now; the partitions extended."""
        payload = {"subscriber": subscriber_id, "extend_ms": extend_ms,
                   "messages": [{"partition": p, "offset": o} for p, o in positions]}
        answer = self._json("POST", _path("v1", "topics", topic, "groups", group, "extend"), payload=payload)
        return [int(p) for p in answer.get("extended", [])]

    def seek(self, topic: str, group: str, *, to: Literal["earliest", "latest"] | None = None,
             timestamp: int | None = None, offsets: Mapping[int, int] | None = None,
             partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Move ``group``'s committed offsets (admin role): to the first message at or after
        ``timestamp`` (ms since the epoch), to the ``"earliest"`` or ``"latest"`` offset, or to
        ``offsets``; for ``partitions`` (default all). Returns the new offsets."""
        payload: dict[str, Any] = {}
        if to is not None:
            payload["to"] = to
        if timestamp is not None:
            payload["timestamp"] = timestamp
        if offsets is not None:
            payload["offsets"] = {str(p): o for p, o in offsets.items()}
        if partitions is not None:
            payload["partitions"] = list(partitions)
        answer = self._json("POST", _path("v1", "topics", topic, "groups", group, "seek"), payload=payload)
        return {int(p): int(o) for p, o in answer.get("offsets", {}).items()}

    def rotate_secret(self, topic: str, group: str, subscriber_id: str, *, secret: str | None = None,
                      overlap_ms: int = 0) -> dict[str, Any]:
        """Make ``secret`` (or a new one, returned as ``"secret"``) a push subscriber's signing secret;
        the previous one stays valid ``overlap_ms``."""
        payload: dict[str, Any] = {"overlap_ms": overlap_ms}
        if secret is not None:
            payload["secret"] = secret
        result: dict[str, Any] = self._json(
            "POST", _path("v1", "topics", topic, "groups", group, "subscribers", subscriber_id, "secret"),
            payload=payload)
        return result


#: ``Client`` is the same class under the name used by most HTTP libraries.
Client = Template


def _chunks(messages: Iterable[Outgoing | tuple[Any, ...]], size: int) -> Iterator[list[Outgoing]]:
    chunk: list[Outgoing] = []
    for item in messages:
        if not isinstance(item, Outgoing):
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise TypeError("send_batch takes Outgoing items or (key, message[, headers]) tuples")
            item = Outgoing(*item)
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
