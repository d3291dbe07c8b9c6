"""Requests waiting for their reply: a bounded map where every entry has a deadline.

The reference's map never forgets an entry. Here each request holds one of ``max_in_flight`` slots
(:meth:`PendingRequests.reserve` waits for a free one: that is the back-pressure), and leaves the map
by its reply, its timeout or a failure to send, whichever comes first; the slot is then free again.
A reply for a request that timed out is counted as late and dropped; one for an unknown id is
counted as missing (as in the reference).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .metrics import BridgeMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")
REMEMBER_EXPIRED = 10_000
"""How many timed-out ids are remembered to tell a late reply from a stray one."""


@dataclass
class _Entry(Generic[T]):
    context: T
    started: float
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


class PendingRequests(Generic[T]):
    """Pending requests of one bridge, keyed by correlation id.

    ``on_timeout(key, context)`` runs on the loop when a request's time is up (it tells the requester).
    """

    def __init__(self, bridge: str, metrics: BridgeMetrics, timeout_s: float, max_in_flight: int,
                 on_timeout: Callable[[str, T], None]) -> None:
        self.bridge = bridge
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout
        self._slots = asyncio.Semaphore(max_in_flight)
        self._entries: dict[str, _Entry[T]] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._loop = asyncio.get_running_loop()
        self._gauge = metrics.pending.labels(bridge)

    def __len__(self) -> int:
        return len(self._entries)

    async def reserve(self) -> None:
        """Wait for a free in-flight slot; pair with :meth:`add` (or :meth:`release` if nothing is sent)."""
        await self._slots.acquire()

    def release(self) -> None:
        """Give back a slot taken by :meth:`reserve` for a request that was never added."""
        self._slots.release()

    def add(self, key: str, context: T) -> None:
        """Track a request (its slot already reserved) until its reply or its timeout."""
        entry = _Entry(context, time.monotonic())
        entry.timer = self._loop.call_later(self.timeout_s, self._expire, key)
        self._entries[key] = entry
        self._gauge.set(len(self._entries))

    def _remove(self, key: str) -> _Entry[T] | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        if entry.timer is not None:
            entry.timer.cancel()
        self._slots.release()
        self._gauge.set(len(self._entries))
        return entry

    def _expire(self, key: str) -> None:
        entry = self._remove(key)
        if entry is None:
            return
        self.metrics.request_timeout_count.labels(self.bridge).inc()
        self._expired[key] = None
        while len(self._expired) > REMEMBER_EXPIRED:
            self._expired.popitem(last=False)
        try:
            self.on_timeout(key, entry.context)
        except Exception:
            log.exception("%s: telling the requester of timeout %s failed", self.bridge, key)

    def resolve(self, key: str) -> T | None:
        """The context of the request ``key`` answers, now done; None (counted) for a late or stray reply."""
        entry = self._remove(key)
        if entry is None:
            self.metrics.request_response_missing_count.labels(self.bridge).inc()
            if key in self._expired:
                self.metrics.late_reply_count.labels(self.bridge).inc()
                log.info("%s: late reply for %s dropped (its request timed out)", self.bridge, key)
            return None
        self.metrics.latency.labels(self.bridge).observe(time.monotonic() - entry.started)
        return entry.context

    def fail(self, key: str) -> T | None:
        """Forget a request that could not be sent; returns its context."""
        entry = self._remove(key)
        return entry.context if entry is not None else None
