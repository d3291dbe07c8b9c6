"""The dispatcher's in-memory view of push delivery: a cache of SQL, rebuilt from it at any time.

The dispatcher's lock guards all of it: every method here is called with the lock held.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..store import Subscriber
from .options import GroupPolicy, PushOptions


@dataclass(slots=True)
class Lane:
    """One (topic, group, partition): where its push delivery stands."""

    position: int = 0          # next offset to push: the committed offset
    end: int = 0               # a known lower bound of the partition's end offset
    dirty: bool = True         # a commit touched the partition since it was last read
    attempts: int = 0          # failed attempts of the message at `position`
    not_before: float = 0.0    # monotonic time before which it is not retried
    careful: bool = False      # after a failure, its head message is sent alone
    busy: bool = False         # a push of this lane is in flight
    holder: str | None = None  # the push subscriber it is assigned to
    generation: int = 0        # bumped by a seek: acks of rounds started before it are dropped
    # Failed pushes of messages past the head: a batch that failed carried them behind it. Only a
    # failed batch adds entries (at most a batch's worth), and the head's advance drops them.
    behind: dict[int, int] = field(default_factory=dict)

    def advance(self, nxt: int) -> None:
        """The head was delivered or dead-lettered: ``nxt`` heads the lane, with its failed pushes so far."""
        if nxt > self.position:
            self.position = nxt
            self.attempts, self.careful, self.not_before = self.behind.pop(nxt, 0), False, 0.0
            if self.behind:
                self.behind = {offset: n for offset, n in self.behind.items() if offset > nxt}

    def restart(self, position: int) -> None:
        """A new head from SQL, a seek or a new receiver: nothing of it has been tried yet."""
        self.position, self.attempts, self.careful, self.not_before = position, 0, False, 0.0
        self.behind.clear()


@dataclass(slots=True)
class Target:
    """One push subscriber and how it has been answering."""

    sub: Subscriber
    options: PushOptions = field(default_factory=PushOptions)
    partitions: list[int] = field(default_factory=list)
    rounds: int = 0            # its pushes in flight, each on partitions of its own
    first_in_flight: bool = False  # one of them runs on the pool's share kept one per subscriber
    careful_in_flight: bool = False  # a failed head is being retried: one at a time per subscriber
    cursor: int = 0            # where in `partitions` the next round starts looking: round robin
    not_before: float = 0.0    # while unreachable, the whole subscriber backs off
    unreachable_since: float | None = None
    unreachable_count: int = 0
    dead_streak: int = 0


@dataclass(slots=True)
class GroupLanes:
    """The lanes and push subscribers of one group of one topic."""

    topic: str
    group: str
    lanes: dict[int, Lane] = field(default_factory=dict)
    policy: GroupPolicy = field(default_factory=GroupPolicy)
    targets: dict[str, Target] = field(default_factory=dict)

    def load(self, count: int, members: dict[str, Subscriber], assignment: dict[int, str],
             committed: dict[int, int], ends: dict[int, int], options: dict[str, str]) -> None:
        """Bring the lanes of ``count`` partitions and the push subscribers ``members`` up to what
        was just read from SQL (the committed offsets, the partitions' ends, the group's options)."""
        self.policy = GroupPolicy.from_text(options.get(""))
        for p in range(count):
            lane = self.lanes.setdefault(p, Lane())
            holder = assignment.get(p)
            holder = holder if holder in members else None
            if not lane.busy:
                # Never back: the SQL read may predate a round that just finished.
                position = max(lane.position, committed.get(p, 0))
                if position != lane.position or holder != lane.holder:  # a new head or a new receiver
                    lane.restart(position)
                lane.end = max(lane.end, ends.get(p, 0))
            lane.holder = holder
        for sid in list(self.targets):
            if sid not in members:
                del self.targets[sid]
        for sid, member in members.items():
            target = self.targets.setdefault(sid, Target(member))
            target.sub = member
            target.options = PushOptions.from_text(options.get(sid))
            target.partitions = sorted(p for p, s in assignment.items() if s == sid)

    def take(self, target: Target, now: float, batch: int) -> tuple[list[int], bool, float | None, bool]:
        """Mark a round's lanes busy (caller holds the lock): a careful one alone (one such round
        at a time per subscriber), else ready ones until their known backlog fills a batch.

        A round stops taking lanes once they hold ``batch`` (``push_batch``) messages, so a backlog is spread
        over up to ``push_in_flight`` rounds in flight (each a full batch) instead of one round
        holding every lane while its round trip runs; a lane with news but no known backlog
        counts as one message, so a steady trickle still goes out in one round. Lanes are looked
        at round robin from where the last round stopped, so a few deep partitions never starve
        the others.

        Returns the lanes, whether they are a careful one, when the soonest backing-off lane seen
        will be ready, and whether the scan stopped before looking at every lane (a full batch, a
        careful lane): only then may another call find more ready lanes.
        """
        sid = target.sub.id
        ready: list[int] = []
        careful = more = False
        soonest: float | None = None
        budget = batch
        partitions = target.partitions
        count = len(partitions)
        start = target.cursor % count if count else 0
        for i in range(count):
            p = partitions[(start + i) % count]
            lane = self.lanes.get(p)
            if lane is None or lane.holder != sid or lane.busy or not (lane.dirty or lane.position < lane.end):
                continue
            if lane.not_before > now:
                soonest = lane.not_before if soonest is None else min(soonest, lane.not_before)
                continue
            if lane.careful:
                if target.careful_in_flight:
                    continue  # retried heads go one at a time, so dead letters count one by one
                ready = [p]
                careful = target.careful_in_flight = more = True
                break
            ready.append(p)
            budget -= max(1, lane.end - lane.position)
            if budget <= 0:
                target.cursor = start + i + 1
                more = True
                break
        for p in ready:
            self.lanes[p].busy = True
            self.lanes[p].dirty = False
        return ready, careful, soonest, more

    def report(self, now: float) -> dict[str, Any]:
        """What is not fine in this group, JSON-ready (see :meth:`.dispatcher.Dispatcher.push_state`)."""
        failing = {str(p): lane.attempts for p, lane in self.lanes.items() if lane.attempts}
        backoff = {str(p): round(lane.not_before - now, 2) for p, lane in self.lanes.items() if lane.not_before > now}
        subscribers = {
            sid: {"unreachable_s": None if t.unreachable_since is None else round(now - t.unreachable_since, 1),
                  "backoff_s": round(max(0.0, t.not_before - now), 2), "dead_streak": t.dead_streak}
            for sid, t in self.targets.items()
            if t.unreachable_since is not None or t.not_before > now or t.dead_streak}
        return {"failing": failing, "backoff": backoff, "subscribers": subscribers}
