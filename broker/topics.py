"""The topics a node knows: looked up in the store once, created on first use, cached."""

from __future__ import annotations

import threading

from .config import Settings
from .errors import BadRequest, NotFound
from .store import MessageStore, Topic


class Topics:
    """Topic lookup and creation with this node's partition settings."""

    def __init__(self, store: MessageStore, settings: Settings) -> None:
        self._store = store
        self._default_partitions = settings.default_partitions
        self._max_partitions = settings.max_partitions
        self._cache: dict[str, Topic] = {}
        self._lock = threading.Lock()

    def cached(self, name: str) -> bool:
        """Whether :meth:`get` knows ``name`` without asking the store."""
        return name in self._cache

    def get(self, name: str, *, create: bool = False, partitions: int | None = None) -> Topic:
        """The topic ``name``; created with ``partitions`` (default from settings) when ``create``.

        Raises:
            NotFound: it does not exist and ``create`` is false.
            BadRequest: the partition count is out of range.
        """
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        topic = self._store.get_topic(name)
        if topic is None:
            if not create:
                raise NotFound(f"topic {name!r} does not exist", code="topic_not_found")
            count = partitions or self._default_partitions
            if not 1 <= count <= self._max_partitions:
                raise BadRequest(f"partitions must be between 1 and {self._max_partitions}",
                                 code="bad_partitions")
            topic, _ = self._store.ensure_topic(name, count)
        with self._lock:
            self._cache[name] = topic
        return topic
