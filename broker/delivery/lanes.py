"""The dispatcher's in-memory view of push delivery: a cache of SQL, rebuilt from it at any time."""

from __future__ import annotations

from dataclasses import dataclass, field

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
