"""One push round: read a subscriber's ready lanes, push their messages, acknowledge what arrived.

What failed goes to :class:`.failures.FailureHandler`. The dispatcher's lock is shared, because
lanes and targets belong to the dispatcher's scheduler.
"""

from __future__ import annotations

import threading
from itertools import repeat
from typing import TYPE_CHECKING, Any

from .formats import fit_envelopes, single_body
from .lanes import GroupLanes, Target
from .push import batch_body, compat_body
from .pusher import Outcome, Pusher
from .signing import push_headers, push_id

if TYPE_CHECKING:
    from ..config import Settings
    from ..metrics import Metrics
    from ..store import GroupRepository
    from .failures import FailureHandler
    from .offsets import OffsetCommitter


class RoundSender:
    """Sends the rounds the dispatcher schedules, on its pool's threads."""

    def __init__(self, settings: Settings, groups: GroupRepository, pusher: Pusher, metrics: Metrics,
                 offsets: OffsetCommitter, failures: FailureHandler, lock: threading.Lock) -> None:
        self.settings = settings
        self.groups = groups
        self.pusher = pusher
        self.metrics = metrics
        self.offsets = offsets
        self.failures = failures
        self._lock = lock

    def send(self, state: GroupLanes, target: Target, taken: list[int]) -> None:
        """Read the round's messages and push them; then acknowledge, or hand the failures on."""
        s = self.settings
        with self._lock:
            starts = {p: state.lanes[p].position for p in taken}
            ends = {p: state.lanes[p].end for p in taken}
            tried = {p: state.lanes[p].attempts for p in taken}
            behind = {p: dict(state.lanes[p].behind) for p in taken if state.lanes[p].behind}
            generations = {p: state.lanes[p].generation for p in taken}
            careful = len(taken) == 1 and state.lanes[taken[0]].careful
            policy = state.policy
        limit = 1 if careful else s.push_batch
        read = self.groups.read(state.topic, starts, limit, ends)
        # Per row of ``read``, whether the filter wants it; without a filter every row is wanted:
        # nothing to make or look up per row.
        wanted = None if policy.filter is None else [policy.matches(r) for r in read]

        def attempt(row: Any) -> int:  # one more than the message's failed pushes
            p = row.partition
            if row.offset == starts[p]:
                return tried[p] + 1
            return behind[p].get(row.offset, 0) + 1 if p in behind else 1

        # The cap is on the whole request body: the batch's own members and commas count too.
        frame = len(batch_body(target.sub.id, state.topic, state.group, []))
        rows, envelopes = fit_envelopes(read, wanted, attempt, s.push_max_bytes - frame)
        # Below the cap, the read took everything each partition had; otherwise look again.
        more = len(read) >= limit or len(rows) < len(read)
        got = {r.partition for r in rows}
        with self._lock:
            for r in rows:  # what was read exists: a failed push must find its lane still ready
                lane = state.lanes[r.partition]
                lane.end = max(lane.end, r.offset + 1)
            for p in taken:
                if more:
                    state.lanes[p].dirty = True
                elif p not in got:  # nothing there after all: it is at its end
                    state.lanes[p].end = state.lanes[p].position
        if not rows:
            return
        sub = target.sub
        acked: dict[int, int] = {}
        failed: dict[int, tuple[Any, Outcome]] = {}
        batch: Outcome | None = None
        if not sub.compat and target.options.format == "envelope" and envelopes:
            body = batch_body(sub.id, state.topic, state.group, envelopes)
            batch = self.pusher.post(str(sub.url), body, self._headers(target, rows, wanted, body))
        delivered = 0
        rode_behind: list[Any] = []  # pushed in a failed batch behind its partition's failed head
        # In (partition, offset) order. rows is a prefix of read, and wanted is per row of read.
        for row, want in zip(rows, repeat(True) if wanted is None else wanted, strict=False):
            p = row.partition
            if p in failed:
                if want and batch is not None:
                    rode_behind.append(row)
                continue  # keep order: nothing after a failed message of the same partition
            if want:
                outcome = batch if batch is not None else self._post_one(state, target, row, attempt(row))
                if not outcome.ok:
                    failed[p] = (row, outcome)
                    if outcome.unreachable and batch is None:
                        break
                    continue
                delivered += 1
            acked[p] = row.offset + 1  # delivered, or filtered out: acknowledged for this group
        if acked:
            self._acked(state, target, acked, delivered, generations)
        with self._lock:  # a seek since this round began: its failures are of the old position
            failed = {p: f for p, f in failed.items() if state.lanes[p].generation == generations[p]}
            if batch is not None and not batch.unreachable:
                # The receiver may have seen the whole body: what followed each failed head was
                # pushed too, and is pushed again later.
                for row in rode_behind:
                    if row.partition in failed:
                        lane = state.lanes[row.partition]
                        lane.behind[row.offset] = lane.behind.get(row.offset, 0) + 1
        if failed:
            self.failures.handle(state, target, failed)

    def _headers(self, target: Target, rows: list[Any], wanted: list[bool] | None,
                 body: bytes) -> dict[str, str]:
        """The signature headers of a push (none when the subscriber has no secret)."""
        pushed = rows if wanted is None else [r for r, want in zip(rows, wanted, strict=False) if want]
        return push_headers(target.sub.id, target.options, push_id(target.sub.group, pushed), body)

    def _post_one(self, state: GroupLanes, target: Target, row: Any, attempt: int) -> Outcome:
        """Push one message alone: to a ToyMB receiver, or in a one-message format."""
        sub = target.sub
        if sub.compat:
            return self.pusher.post(str(sub.url), compat_body(state.topic, sub.id, row))
        body, headers = single_body(target.options.format, row, sub.id, state.group, attempt)
        headers.update(push_headers(sub.id, target.options, push_id(sub.group, [row]), body))
        return self.pusher.post(str(sub.url), body, headers)

    def _acked(self, state: GroupLanes, target: Target, acked: dict[int, int], delivered: int,
               generations: dict[int, int]) -> None:
        if delivered:
            self.metrics.deliveries.labels(state.topic, state.group, "push").inc(delivered)
        with self._lock:
            # Under the lock, so a seek (which bumps the generation under it) sees these acks
            # either pending in the committer, where it drops them, or not at all.
            acked = {p: n for p, n in acked.items() if state.lanes[p].generation == generations[p]}
            self.offsets.add(state.topic, state.group, acked)
            for p, nxt in acked.items():
                lane = state.lanes[p]
                lane.advance(nxt)  # a message was delivered here: its successor is the head
                lane.end = max(lane.end, nxt)
            if delivered:
                target.unreachable_since, target.unreachable_count, target.dead_streak = None, 0, 0
                target.not_before = 0.0
