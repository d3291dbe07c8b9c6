"""The lease reaper: expired subscribers lose their partitions; also keeps the lag gauge fresh."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import BrokerError
from .groups import GroupStore, now_ms

if TYPE_CHECKING:
    from ..node import Node

log = logging.getLogger(__name__)

# Expired subscribers are kept this long, so a late heartbeat or poll can bring them back with the
# same id; then they are forgotten.
PURGE_AFTER_MS = 3_600_000
_LAG_EVERY_S = 2.0
_PURGE_EVERY_S = 60.0


class Reaper:
    """A node service: rebalances groups whose subscribers' leases ended, on the topics this node owns."""

    ready = True

    def __init__(self, node: Node, groups: GroupStore, on_rebalance: Callable[[str, str], None]) -> None:
        self.node = node
        self.groups = groups
        self.on_rebalance = on_rebalance
        # A quarter lease: a dead subscriber's partitions move within 1.25 lease periods.
        self.interval = min(1.0, max(0.05, node.settings.subscriber_lease_ms / 4000.0))
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="toymb-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        next_lag = next_purge = 0.0
        while not self._stopping.wait(self.interval):
            try:
                self.reap()
                now = time.monotonic()
                if now >= next_lag:
                    next_lag = now + _LAG_EVERY_S
                    self.update_lag()
                if now >= next_purge:
                    next_purge = now + _PURGE_EVERY_S
                    self.groups.purge(now_ms() - PURGE_AFTER_MS)
            except Exception:
                log.exception("lease reaper round failed")

    def reap(self) -> int:
        """Rebalance every owned group where an expired subscriber holds partitions; returns how many."""
        count = 0
        for topic, group in self.groups.stale_groups(now_ms()):
            if not self.node.owns(topic):
                continue
            try:
                partitions = self.node.topic(topic).partitions
            except BrokerError:
                continue
            self.groups.rebalance(topic, partitions, group)
            log.info("rebalanced %s/%s after a lease expired", topic, group)
            self.on_rebalance(topic, group)
            count += 1
        return count

    def update_lag(self) -> None:
        pairs = [(t, g) for t, g in self.groups.all_groups() if self.node.owns(t)]
        for (topic, group), lag in self.groups.lags(pairs).items():
            self.node.metrics.lag.labels(topic, group).set(lag)
