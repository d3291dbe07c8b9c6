"""What happens after a failed push: backoff, dead letters, and revoking a subscriber that keeps failing.

A failed lane becomes *careful*: its head is retried alone, with exponential backoff and jitter,
until ``push_max_attempts`` (or the group's dead-letter policy) sends it to the dead-letter topic.
A receiver that cannot be reached is not the message's fault: it is retried without using up
attempts, and loses its lease after a lease period unreachable, or after ``push_fail_limit``
dead letters in a row.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..errors import BrokerError
from .lanes import GroupLanes, Target
from .push import backoff_s
from .pusher import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config import Settings
    from ..metrics import Metrics
    from ..store import GroupRepository
    from ..topics import Topics
    from .deadletter import DeadLetters

log = logging.getLogger(__name__)


class FailureHandler:
    """The dispatcher's failure policy; ``invalidate`` makes the dispatcher reload a group's lanes."""

    def __init__(self, settings: Settings, groups: GroupRepository, topics: Topics, metrics: Metrics,
                 dead_letters: DeadLetters, lock: threading.Lock, invalidate: Callable[[str, str], None]) -> None:
        self.settings = settings
        self.groups = groups
        self.topics = topics
        self.metrics = metrics
        self.dead_letters = dead_letters
        self._lock = lock
        self._invalidate = invalidate

    def handle(self, state: GroupLanes, target: Target, failed: dict[int, tuple[Any, Outcome]]) -> None:
        """Back the failed lanes off, dead-letter heads out of attempts, revoke a hopeless subscriber."""
        s = self.settings
        if self.groups.get(target.sub.id) is None:
            # The subscriber left the group while its push was in flight (a ToyMB receiver that
            # restarted, re-registered, and answers 500 for its former id): the message is not at
            # fault, and the partition's next push goes to whoever holds it now.
            self._invalidate(state.topic, state.group)
            return
        now = time.monotonic()
        dead = state.policy.dead_letter
        max_attempts = dead.max_attempts if dead else s.push_max_attempts
        low_ms = dead.min_backoff_ms if dead else s.push_backoff_ms
        high_ms = dead.max_backoff_ms if dead else s.push_backoff_max_ms
        to_dead: list[tuple[int, Any, Outcome, int]] = []
        revoke = False
        with self._lock:
            unreachable = any(o.unreachable for _, o in failed.values())
            if unreachable:
                target.unreachable_count += 1
                if target.unreachable_since is None:
                    target.unreachable_since = now
                revoke = now - target.unreachable_since >= s.subscriber_lease_ms / 1000.0
                target.not_before = now + backoff_s(target.unreachable_count, s.push_backoff_ms,
                                                    s.push_backoff_max_ms)
            for p, (row, outcome) in failed.items():
                lane = state.lanes[p]
                lane.careful = True
                if outcome.unreachable:
                    self.metrics.push_retries.labels(state.topic, state.group).inc()
                    lane.not_before = now + backoff_s(target.unreachable_count, s.push_backoff_ms,
                                                      s.push_backoff_max_ms)
                    continue
                lane.attempts += 1
                if lane.attempts >= max_attempts:
                    to_dead.append((p, row, outcome, lane.attempts))
                else:
                    self.metrics.push_retries.labels(state.topic, state.group).inc()
                    lane.not_before = now + backoff_s(lane.attempts, low_ms, high_ms)
        for p, row, outcome, attempts in to_dead:
            try:
                self.dead_letters.send(state.topic, state.group, target.sub.id, row, outcome.reason, attempts,
                                       outcome.status)
                self.groups.commit(state.topic, state.group, {p: row.offset + 1})
            except Exception as exc:  # noqa: BLE001 - retry the dead-lettering later, do not move on
                log.warning("dead-lettering %s/%s offset %d failed: %s", state.topic, p, row.offset, exc)
                with self._lock:
                    state.lanes[p].not_before = time.monotonic() + backoff_s(state.lanes[p].attempts, low_ms, high_ms)
                continue
            self.metrics.dead_letters.labels(state.topic, state.group).inc()
            log.warning("dead-lettered %s partition %d offset %d for group %s after %d attempts: %s",
                        state.topic, p, row.offset, state.group, attempts, outcome.reason)
            with self._lock:
                lane = state.lanes[p]
                lane.advance(row.offset + 1)
                target.dead_streak += 1
                revoke = revoke or target.dead_streak >= s.push_fail_limit
        if revoke:
            self._revoke(state, target)

    def _revoke(self, state: GroupLanes, target: Target) -> None:
        """Take the lease of a subscriber that keeps failing, so its partitions move to the others."""
        log.warning("push subscriber %s of %s/%s keeps failing: revoking its lease", target.sub.id,
                    state.topic, state.group)
        with self._lock:
            # No further round for it: the reload that moves its partitions runs on another thread.
            if state.targets.get(target.sub.id) is target:
                del state.targets[target.sub.id]
            for lane in state.lanes.values():
                if lane.holder == target.sub.id:
                    lane.holder = None
        self.groups.revoke(target.sub.id)
        try:
            count = self.topics.get(state.topic).partitions
        except BrokerError:
            return
        self.groups.rebalance(state.topic, count, state.group)
        with self._lock:
            target.unreachable_since, target.dead_streak = None, 0
        self._invalidate(state.topic, state.group)
