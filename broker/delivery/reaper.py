"""The lease reaper: expired subscribers lose their partitions; also keeps the lag gauge fresh."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..background import Worker
from ..errors import BrokerError
from ..store import GroupRepository, now_ms

if TYPE_CHECKING:
    from ..cluster.router import Router
    from ..config import Settings
    from ..metrics import Metrics
    from ..topics import Topics

log = logging.getLogger(__name__)

# Expired subscribers are kept this long, so a late heartbeat or poll can bring them back with the
# same id; then they are forgotten.
PURGE_AFTER_MS = 3_600_000
_LAG_EVERY_S = 2.0
_FULL_LAG_EVERY_S = 60.0
_FULL_REAP_EVERY_S = 60.0
# Leases read as ending "since the last look" overlap it by this much: clocks of nodes differ.
_REAP_SLACK_MS = 5000
_PURGE_EVERY_S = 60.0


class Reaper:
    """A node service: rebalances groups whose subscribers' leases ended, on the topics this node owns."""

    ready = True

    def __init__(self, settings: Settings, groups: GroupRepository, topics: Topics, router: Router, metrics: Metrics,
                 on_rebalance: Callable[[str, str], None]) -> None:
        self.groups = groups
        self.topics = topics
        self.router = router
        self.metrics = metrics
        self.on_rebalance = on_rebalance
        # A quarter lease: a dead subscriber's partitions move within 1.25 lease periods.
        self.interval = min(1.0, max(0.05, settings.subscriber_lease_ms / 4000.0))
        self._worker = Worker("toymb-reaper", self._run)
        self._published: set[str] = set()
        self._reaped_to: int | None = None  # leases that ended before this were handled

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._worker.stop()

    def _run(self) -> None:
        next_lag = next_full_lag = next_purge = next_full_reap = 0.0
        while not self._worker.stopping.wait(self.interval):
            try:
                now = time.monotonic()
                everything = now >= next_full_reap
                if everything:
                    next_full_reap = now + _FULL_REAP_EVERY_S
                self.reap(everything)
                if now >= next_lag:
                    next_lag = now + _LAG_EVERY_S
                    everything = now >= next_full_lag  # also catches topics that became owned here
                    if everything:
                        next_full_lag = now + _FULL_LAG_EVERY_S
                    self.update_lag(everything)
                if now >= next_purge:
                    next_purge = now + _PURGE_EVERY_S
                    self.groups.purge(now_ms() - PURGE_AFTER_MS)
            except Exception:
                log.exception("lease reaper round failed")
                self._reaped_to = None  # look at everything next time

    def reap(self, everything: bool = False) -> int:
        """Rebalance owned groups where an expired subscriber holds partitions; returns how many.

        Usually only the leases that ended since the last look are read (a small query however
        many subscribers are idle); ``everything`` looks at every assignment, which the loop does
        now and then and after a failed round, and which finds deleted subscribers too.
        """
        at = now_ms()
        if everything or self._reaped_to is None:
            pairs = self.groups.stale_groups(at)
        else:
            pairs = self.groups.expired_between(self._reaped_to - _REAP_SLACK_MS, at)
        count = 0
        for topic, group in pairs:
            if not self.router.owns(topic):
                continue
            try:
                partitions = self.topics.get(topic).partitions
            except BrokerError:
                continue
            self.groups.rebalance(topic, partitions, group)
            log.info("rebalanced %s/%s after a lease expired", topic, group)
            self.on_rebalance(topic, group)
            count += 1
        self._reaped_to = at
        return count

    def on_commit(self, topic: str, partitions: set[int]) -> None:
        """Appender listener: the lag of ``topic``'s groups grew."""
        self._published.add(topic)

    def update_lag(self, everything: bool = False) -> None:
        """Refresh the lag gauge of the groups whose topic saw publishes or commits (or of all)."""
        published, self._published = self._published, set()
        changed = published | self.groups.take_offsets_moved()
        if not changed and not everything:
            return  # idle groups cost nothing
        pairs = [(t, g) for t, g in self.groups.all_groups()
                 if (everything or t in changed) and self.router.owns(t)]
        for (topic, group), lag in self.groups.lags(pairs).items():
            self.metrics.lag.labels(topic, group).set(lag)
