"""The push dispatcher: at least once, in order per (group, partition), on a bounded worker pool.

Each (topic, group, partition) is a *lane*. A lane has at most one push in flight, and its next
message is only pushed after the previous one was acknowledged (then its committed offset moves
in SQL), so order per partition holds. One scheduler thread hands *rounds* to a fixed pool: a
round takes the ready lanes of one push subscriber, reads their next messages and sends them in
one request (ToyMB-compatible subscribers get one request per message). A subscriber has up
to ``push_in_flight`` rounds in flight, on disjoint lanes, so a lane's order holds while the
next round overlaps the previous one's round trip. Its first round runs on a pool with one
worker per subscriber's round (``push_workers``); the others start only on an idle worker of a
second pool of that size, so they never queue behind another subscriber, and the thread count
never depends on partitions or groups.

A round itself (read, push, acknowledge) is :mod:`.rounds`. After a failed push
(:mod:`.failures`), the lanes involved are *careful*: their head message is retried alone, so a
poison message cannot drag its batch-mates to the dead-letter topic.

Memory holds only a cache of SQL (:mod:`.lanes`: positions, known ends): lanes are reloaded from
the committed offsets whenever a topic becomes owned or a group rebalances, and a few groups at a
time as a safety net. Those reloads read SQL on a thread of their own, so a slow read never holds up the
scheduler's next round. The scheduler looks only at subscribers that something happened to, so
an idle subscriber costs nothing.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..background import Worker
from ..errors import BrokerError
from ..store import GroupRepository
from .failures import FailureHandler
from .lanes import GroupLanes, Lane, Target
from .offsets import OffsetCommitter
from .pusher import Pusher
from .rounds import RoundSender

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..cluster.router import Router
    from ..config import Settings
    from ..metrics import Metrics
    from ..store import MessageStore
    from ..topics import Topics
    from .deadletter import DeadLetters

log = logging.getLogger(__name__)

REFRESH_S = 2.0
# Groups re-read from SQL each refresh tick although nothing invalidated them: a safety net.
ROLLING_RELOADS = 2
# A push subscriber as the scheduler knows it: (topic, group, subscriber id).
Key = tuple[str, str, str]


class Dispatcher:
    """A node service that pushes every owned topic's messages to its push subscribers."""

    ready = True

    def __init__(self, settings: Settings, groups: GroupRepository, topics: Topics, router: Router, store: MessageStore,
                 metrics: Metrics, push_addresses: Callable[[str], list[str]], dead_letters: DeadLetters) -> None:
        self.groups = groups
        self.settings = settings
        self.topics = topics
        self.router = router
        self.store = store
        self.metrics = metrics
        self.dead_letters = dead_letters
        # Every push asks the allowlist anew, at connect time.
        self.pusher = Pusher(settings.push_timeout_ms, push_addresses)
        self.offsets = OffsetCommitter(groups)
        self._lock = threading.Lock()
        failures = FailureHandler(settings, groups, topics, metrics, dead_letters, self._lock, self.invalidate)
        self._rounds = RoundSender(settings, groups, self.pusher, metrics, self.offsets, failures, self._lock)
        self._pool: ThreadPoolExecutor | None = None
        self._extra_pool: ThreadPoolExecutor | None = None
        self._worker = Worker("toymb-dispatcher", self._run)
        # Reloads from SQL: on the scheduler's thread they delayed every push behind them (tens of
        # milliseconds every refresh tick on a busy node, the tail of push latency).
        self._reloader = Worker("toymb-dispatcher-reload", self._reload_run)
        self._state: dict[tuple[str, str], GroupLanes] = {}
        self._stale: set[tuple[str, str]] = set()
        self._loaded_at: dict[tuple[str, str], float] = {}
        self._candidates: set[Key] = set()
        self._timers: dict[Key, float] = {}
        self._heap: list[tuple[float, Key]] = []
        self._refresh_at = 0.0
        self._in_flight = settings.push_in_flight
        self._extra_running = 0  # rounds running beyond their subscriber's first
        # Seeks per group: a reload that read SQL before a seek must not apply what it read.
        self._seeks: dict[tuple[str, str], int] = {}

    # -- service ------------------------------------------------------------------------------

    def start(self) -> None:
        self.offsets.start()
        # Each push subscriber has at most one round in this pool, so slow receivers hold only
        # their own worker. Its further rounds (push_in_flight) start only on an idle worker of
        # the second pool: they never queue behind anyone.
        self._pool = ThreadPoolExecutor(max_workers=self.settings.push_workers, thread_name_prefix="toymb-push")
        self._extra_pool = ThreadPoolExecutor(max_workers=self.settings.push_workers,
                                              thread_name_prefix="toymb-push-more")
        self._worker.start()
        self._reloader.start()

    def stop(self) -> None:
        self._reloader.stop()
        self._worker.stop()
        with self._lock:  # rounds start under the lock, from any thread: none on a pool shut down
            pools = (self._pool, self._extra_pool)
            self._pool = self._extra_pool = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self.offsets.stop()
        self.pusher.close()

    # -- hooks --------------------------------------------------------------------------------

    def on_commit(self, topic: str, partitions: set[int]) -> None:
        """Appender listener: new messages in ``partitions`` of ``topic``."""
        news = False
        with self._lock:
            for (name, _), group in self._state.items():
                if name == topic:
                    for p in partitions:
                        lane = group.lanes.get(p)
                        if lane is not None:
                            lane.dirty = True
                            if lane.holder is not None:
                                self._consider((topic, group.group, lane.holder))
                                news = True
        if news:  # scheduling costs a few locks: only for a subscriber with something to do
            self._schedule_now()

    def invalidate(self, topic: str, group: str) -> None:
        """Reload a group from SQL now (its members or assignment changed)."""
        with self._lock:
            self._stale.add((topic, group))
        self._reloader.wake.set()

    def push_state(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Where push stands for each group this node dispatches: failing lanes and backing-off subscribers.

        Per (topic, group), JSON-ready: ``{"failing": {"<partition>": attempts}, "backoff":
        {"<partition>": seconds left}, "subscribers": {sid: {"unreachable_s", "backoff_s",
        "dead_streak"}}}``, only the entries that are not fine, so a healthy group costs a few
        bytes. Read by the operator console.
        """
        now = time.monotonic()
        with self._lock:
            return {pair: group.report(now) for pair, group in self._state.items()}

    # -- scheduling ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._worker.stopping.is_set():
            try:
                due = self._schedule(time.monotonic())
            except Exception:
                log.exception("dispatcher round failed")
                due = time.monotonic() + 1.0
            self._worker.wake.wait(max(0.001, due - time.monotonic()))
            self._worker.wake.clear()

    def _schedule_now(self) -> None:
        """Start the candidates' rounds on this thread (a commit's writer, a round's worker).

        Handing them to the scheduler's thread cost a thread wake-up before every push, waiting
        for the GIL behind whatever else ran (0.3 ms at the median, several at the tail, of the
        5,000 msg/s bench's end-to-end latency). Starting a round never blocks: it is a submit to a
        pool. The scheduler's thread still runs the timers (backoffs) and the reloads' news.
        """
        try:
            self._schedule(time.monotonic())
        except Exception:
            log.exception("dispatcher round failed")
        if self._heap:  # a timer may now be due before the one the scheduler's thread waits for
            self._worker.wake.set()

    def _reload_run(self) -> None:
        """The reloads' thread: invalidated groups at once, and every REFRESH_S the refresh."""
        while not self._reloader.stopping.is_set():
            # Cleared before the work, not after the wait: an invalidation that lands while this
            # pass runs keeps the event set, so the wait below returns at once (cleared after the
            # wait, it was lost, and a subscriber's new secret waited for the rolling reloads).
            self._reloader.wake.clear()
            try:
                now = time.monotonic()
                if now >= self._refresh_at:
                    self._refresh_at = now + REFRESH_S
                    self._refresh_all()
                else:
                    with self._lock:
                        stale, self._stale = self._stale, set()
                    for topic, group in stale:
                        self._reload(topic, group)
            except Exception:
                log.exception("dispatcher reload failed")
            self._worker.wake.set()  # what was reloaded may have rounds to start
            self._reloader.wake.wait(max(0.001, self._refresh_at - time.monotonic()))

    def _refresh_all(self) -> None:
        """Load groups that became pushable here, drop gone ones, and re-read a few of the others.

        Every change this node makes (registration, rebalance, lease loss) invalidates its group
        at once; re-reading the rest, a few each tick, is only a safety net, so its cost does not
        grow with the number of idle groups.
        """
        wanted = {pair for pair in self.groups.live_groups("push") if self.router.owns(pair[0])}
        with self._lock:
            for pair in list(self._state):
                if pair not in wanted:
                    del self._state[pair]  # rounds in flight keep their own references
                    self._loaded_at.pop(pair, None)
            invalidated = self._stale & wanted
            self._stale -= wanted
            fresh = [pair for pair in wanted if pair not in self._state]
            oldest = heapq.nsmallest(ROLLING_RELOADS, self._state, key=lambda pair: self._loaded_at.get(pair, 0.0))
        for topic, group in dict.fromkeys(sorted(fresh) + sorted(invalidated) + oldest):
            self._reload(topic, group)

    def _reload(self, topic: str, group: str) -> None:
        if not self.router.owns(topic):
            with self._lock:
                self._state.pop((topic, group), None)
                self._loaded_at.pop((topic, group), None)
            return
        try:
            count = self.topics.get(topic).partitions
        except BrokerError:
            return
        with self._lock:
            seeks = self._seeks.get((topic, group), 0)
        at = int(time.time() * 1000)
        members = {m.id: m for m in self.groups.members(topic, group) if m.mode == "push" and m.live(at)}
        assignment = self.groups.assignment(topic, group)
        committed = self.groups.committed(topic, group)
        ends = self.store.end_offsets(topic)
        options = self.groups.options(topic, group)
        with self._lock:
            if self._seeks.get((topic, group), 0) != seeks:
                self._stale.add((topic, group))  # read before a seek: read again
                self._reloader.wake.set()
                return
            if not members:
                self._state.pop((topic, group), None)
                self._loaded_at.pop((topic, group), None)
                return
            state = self._state.setdefault((topic, group), GroupLanes(topic, group))
            state.load(count, members, assignment, committed, ends, options)
            for sid in members:
                self._consider((topic, group, sid))
            self._loaded_at[(topic, group)] = time.monotonic()

    def _consider(self, key: Key) -> None:
        """Look at this subscriber at the next schedule (caller holds the lock)."""
        self._candidates.add(key)

    def _timer(self, key: Key, at: float) -> None:
        """Look at this subscriber again at ``at`` (caller holds the lock)."""
        if at < self._timers.get(key, float("inf")):
            self._timers[key] = at
            heapq.heappush(self._heap, (at, key))

    def _schedule(self, now: float) -> float:
        """Start a round for every candidate subscriber with ready lanes; returns when to look again.

        Only subscribers that something happened to are looked at (new messages in a partition
        they hold, a reload, their last round ending, a backoff running out), so idle
        subscribers cost nothing however many there are.
        """
        with self._lock:
            pool, extra_pool = self._pool, self._extra_pool
            if pool is None or extra_pool is None:
                return now + REFRESH_S
            while self._heap and self._heap[0][0] <= now:
                at, key = heapq.heappop(self._heap)
                if self._timers.get(key) == at:
                    del self._timers[key]
                    self._candidates.add(key)
            candidates, self._candidates = self._candidates, set()
            for key in candidates:
                state = self._state.get((key[0], key[1]))
                target = state.targets.get(key[2]) if state is not None else None
                if state is None or target is None or target.rounds >= self._in_flight:
                    continue  # gone, or a round in flight will make it a candidate again
                if target.not_before > now:
                    self._timer(key, target.not_before)
                    continue
                while target.rounds < self._in_flight:
                    first = not target.first_in_flight
                    if not first and self._extra_running >= self.settings.push_workers:
                        break  # no idle worker for more: never queue behind other subscribers
                    taken, careful, soonest, more = state.take(target, now, self.settings.push_batch)
                    if taken:
                        target.rounds += 1
                        if first:
                            target.first_in_flight = True
                        else:
                            self._extra_running += 1
                        (pool if first else extra_pool).submit(self._round, state, target, taken, first, careful)
                    if not more:
                        # Every lane was looked at: none is left ready. Scanning them all again only
                        # to find that held the GIL between the submit and its round's start.
                        if soonest is not None:
                            self._timer(key, soonest)
                        break
            return self._heap[0][0] if self._heap else now + REFRESH_S

    # -- one round ----------------------------------------------------------------------------

    def _round(self, state: GroupLanes, target: Target, taken: list[int], first: bool, careful: bool) -> None:
        try:
            if self.router.owns(state.topic):
                self._rounds.send(state, target, taken)
        except Exception:
            log.exception("push round for %s/%s failed", state.topic, state.group)
            with self._lock:
                for p in taken:
                    state.lanes[p].not_before = time.monotonic() + 1.0
        finally:
            with self._lock:
                for p in taken:
                    lane = state.lanes[p]
                    lane.busy = False
                    if lane.holder is not None and lane.holder != target.sub.id:
                        # Reassigned during this round (a subscriber joined or left): its new
                        # holder skipped it while busy, and nothing else would look again until
                        # the refresh tick (a joining subscriber's first pushes came 1-2.5 s late).
                        self._consider((state.topic, state.group, lane.holder))
                if careful:
                    target.careful_in_flight = False
                target.rounds -= 1
                if first:
                    target.first_in_flight = False
                else:
                    self._extra_running -= 1
                self._consider((state.topic, state.group, target.sub.id))
            self._schedule_now()

    # -- seek ---------------------------------------------------------------------------------

    def seek(self, topic: str, group: str, next_offsets: dict[int, int], write: Callable[[], None]) -> None:
        """Move the group's lanes to ``next_offsets``; ``write`` stores them as committed offsets.

        It all happens under the dispatcher's lock and the committer's write lock: rounds in flight
        for those partitions finish, but their acks are dropped (a new generation), pending commits
        of them are dropped, and a reload that read SQL before is not applied; so the replay
        starts exactly at the sought offsets.
        """
        with self._lock:
            self._seeks[(topic, group)] = self._seeks.get((topic, group), 0) + 1
            self.offsets.forget(topic, group, set(next_offsets), then=write)
            state = self._state.get((topic, group))
            if state is not None:
                for p, nxt in next_offsets.items():
                    lane = state.lanes.setdefault(p, Lane())
                    lane.generation += 1
                    lane.restart(nxt)
                    lane.dirty = True
                    if lane.holder is not None:
                        self._consider((topic, group, lane.holder))
        self._worker.wake.set()
