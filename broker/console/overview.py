"""The overview the console page and ``toymb status`` show: one JSON document per look.

It is built from what the node already has: the membership view (nodes, liveness, leases), the
router (who owns which topic), the store's topics and end offsets, the groups as
``GET /v1/topics/{t}/groups/{g}`` describes them, the journal's offsets in the store, this node's
push dispatcher, and the bridges and journal job configured for the console (:mod:`.remote`).

Sizes are capped (:data:`MAX_TOPICS`, :data:`MAX_GROUPS`; per group only the partitions with lag),
and ``truncated`` says when something was left out. Rates are not computed here: the page and
``toymb status --watch`` take them from two looks' end offsets.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..delivery.assignment import partitions_by_member
from .peers import cluster_push_state
from .progress import ProgressTracker

if TYPE_CHECKING:
    from ..node import Node
    from ..security.tokens import Grant
    from .remote import Remotes

MAX_TOPICS = 500
MAX_GROUPS = 200
MAX_PARTITIONS_SHOWN = 20   # per group: the stuck ones first, then the largest lag
# Subscribers and assignments are re-read this often (lag and offsets at every look).
ROSTER_S = 10.0
# (topic, group) -> (the node dispatching it, its push state)
PushByGroup = dict[tuple[str, str], tuple[str, dict[str, Any]]]
# One overview serves every viewer for this long: ten open consoles cost the store one build.
CACHE_S = 0.5


def cluster_section(node: Node) -> dict[str, Any]:
    """The registered nodes as this node last read them, with the age of each one's heartbeat.

    A node that stopped cleanly gave its lease back (heartbeat 0): its age is None and ``left`` true,
    not the time since 1970.
    """
    view = node.membership.view
    now = view.db_now_ms
    nodes = [{"name": r.name, "id": r.id, "url": r.url, "alive": r.alive, "left": r.heartbeat_ms == 0,
              "lease_age_ms": None if r.heartbeat_ms == 0 else max(0, now - r.heartbeat_ms),
              "started": r.started_ms}
             for r in sorted(view.rows, key=lambda r: r.name)]
    return {"answered_by": node.name, "lease_ms": node.settings.node_lease_ms, "checked_at": now,
            "lease_fresh": node.membership.lease_fresh(), "live": sorted(m.name for m in view.live), "nodes": nodes}


def _per_topic(ends: dict[tuple[str, int], int],
               journaled: dict[tuple[str, int], int]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """In one pass over the partitions: each topic's end offsets summed, and its [journaled, journal lag]."""
    totals: dict[str, int] = {}
    journal: dict[str, list[int]] = {}
    for key, end in ends.items():
        topic = key[0]
        totals[topic] = totals.get(topic, 0) + end
        at = min(journaled.get(key, 0), end)
        row = journal.get(topic)
        if row is None:
            journal[topic] = [at, end - at]
        else:
            row[0] += at
            row[1] += end - at
    return totals, journal


def topics_and_journal(node: Node) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """The topics (owner, epoch, end offsets, dead-letter depth) and the journal's offsets per topic."""
    all_topics = node.store.list_topics()
    truncated = len(all_topics) > MAX_TOPICS
    shown = sorted(all_topics, key=lambda t: t.name)[:MAX_TOPICS]
    if node.journal is not None:
        ends, journaled = node.journal.end_offsets(), node.journal.journaled_offsets()
    else:  # a node built without its journal repository: the journal section shows nothing journaled
        ends, journaled = {(t.name, p): e for t in shown for p, e in node.store.end_offsets(t.name).items()}, {}
    end_totals, journal_sums = _per_topic(ends, journaled)
    suffix = node.settings.dlq_suffix
    topics = []
    journal_rows: list[dict[str, Any]] = []
    for topic in shown:
        dlq = topic.name + suffix
        end = end_totals.get(topic.name, 0)
        topics.append({"name": topic.name, "partitions": topic.partitions, "owner": node.router.owner_of(topic.name),
                       "claimed_by": topic.owner, "epoch": topic.epoch, "end": end,
                       "dlq": dlq if dlq in end_totals else None, "dlq_depth": end_totals.get(dlq, 0)})
        done, lag = journal_sums.get(topic.name, (0, 0))
        journal_rows.append({"topic": topic.name, "journaled": done, "end": end, "lag": lag})
    journal: dict[str, Any] = {"topics": journal_rows, "lag": sum(int(r["lag"]) for r in journal_rows),
                               "journaled": sum(int(r["journaled"]) for r in journal_rows)}
    return topics, journal, truncated


@dataclass(frozen=True)
class Roster:
    """A group's subscribers (with how many partitions each holds) and who holds which partition."""

    subscribers: list[dict[str, Any]]
    assignment: dict[int, str]


class Rosters:
    """Each group's subscribers and assignment, re-read at most every :data:`ROSTER_S`.

    They change only when someone joins, leaves or loses a lease, while lag changes all the time:
    reading them at every look would be most of the overview's cost (two queries per group).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = -ROSTER_S
        self._rosters: dict[tuple[str, str], Roster] = {}

    def get(self, node: Node, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Roster]:
        with self._lock:
            stale = time.monotonic() - self._at >= ROSTER_S or any(p not in self._rosters for p in pairs)
            if stale:
                groups = node.delivery.groups
                fresh: dict[tuple[str, str], Roster] = {}
                for topic, group in pairs:
                    assignment = groups.assignment(topic, group)
                    held = partitions_by_member(assignment)
                    subscribers = [{**m.to_json([]), "partitions": len(held.get(m.id, []))}
                                   for m in groups.members(topic, group)]
                    fresh[(topic, group)] = Roster(subscribers, assignment)
                self._rosters, self._at = fresh, time.monotonic()
            return self._rosters


def groups_section(node: Node, tracker: ProgressTracker, rosters: Rosters, push: PushByGroup,
                   now_ms: int) -> tuple[list[dict[str, Any]], bool]:
    """Every group: members, total lag, its lagging partitions (stuck ones first) and push state.

    Every lagging partition of every group comes from one read (:meth:`GroupRepository.lagging`).
    """
    delivery = node.delivery
    pairs = sorted(delivery.groups.all_groups())
    truncated = len(pairs) > MAX_GROUPS
    pairs = pairs[:MAX_GROUPS]
    behind = delivery.groups.lagging(pairs)
    roster = rosters.get(node, pairs)
    looked: set[tuple[str, str]] = set()
    groups = []
    for topic, group in pairs:
        members = roster.get((topic, group), Roster([], {}))
        lagging = behind.get((topic, group), {})
        idle = tracker.observe((topic, group), lagging, now_ms) if lagging else {}
        if lagging:
            looked.add((topic, group))
        stuck = {p for p, (ms, _) in idle.items() if tracker.is_stuck(ms)}
        # Stuck first, then the largest lag.
        shown = heapq.nsmallest(MAX_PARTITIONS_SHOWN, lagging.items(),
                                key=lambda item: (item[0] not in stuck, item[1][0] - item[1][1]))
        rows = [{"partition": p, "committed": committed, "end": end, "lag": end - committed,
                 "subscriber": members.assignment.get(p), "stuck": p in stuck,
                 "idle_ms": idle.get(p, (0, False))[0], "growing": idle.get(p, (0, False))[1]}
                for p, (committed, end) in shown]
        groups.append({"topic": topic, "group": group, "modes": sorted({s["mode"] for s in members.subscribers}),
                       "subscribers": members.subscribers,
                       "total_lag": sum(end - committed for committed, end in lagging.values()),
                       "stuck": len(stuck), "lagging_partitions": len(lagging), "lagging": rows,
                       "push": push[(topic, group)][1] if (topic, group) in push else None,
                       "dispatched_by": push[(topic, group)][0] if (topic, group) in push else None})
    tracker.forget_except(looked)
    return groups, truncated


def build(node: Node, tracker: ProgressTracker, rosters: Rosters, remotes: Remotes) -> dict[str, Any]:
    """The whole overview, for every topic (filter it per viewer with :func:`for_grant`)."""
    now_ms = int(time.time() * 1000)
    topics, journal, topics_cut = topics_and_journal(node)
    push, peers = cluster_push_state(node, remotes)
    groups, groups_cut = groups_section(node, tracker, rosters, push, now_ms)
    journal["health"] = remotes.journal()
    return {"node": node.name, "checked_ms": now_ms, "refresh_ms": node.settings.console_refresh_ms,
            "stuck_after_ms": tracker.stuck_after_ms, "cluster": cluster_section(node), "topics": topics,
            "groups": groups, "journal": journal, "bridges": remotes.bridges(), "peers": peers,
            "truncated": {"topics": topics_cut, "groups": groups_cut}}


def for_grant(overview: dict[str, Any], grant: Grant | None) -> dict[str, Any]:
    """``overview`` with only the topics (and their groups and journal rows) ``grant`` covers."""
    if grant is None or grant.has_role("admin") or grant.patterns == ("*",):
        return overview
    journal_rows = [r for r in overview["journal"]["topics"] if grant.covers(r["topic"])]
    return {**overview,
            "topics": [t for t in overview["topics"] if grant.covers(t["name"])],
            "groups": [g for g in overview["groups"] if grant.covers(g["topic"])],
            "journal": {**overview["journal"], "topics": journal_rows, "lag": sum(r["lag"] for r in journal_rows),
                        "journaled": sum(r["journaled"] for r in journal_rows)}}


class Overviews:
    """Builds the overview at most once per :data:`CACHE_S`, whoever asks."""

    def __init__(self, build_one: Callable[[], dict[str, Any]]) -> None:
        self._build = build_one
        self._lock = threading.Lock()
        self._at = 0.0
        self._last: dict[str, Any] | None = None

    def get(self) -> dict[str, Any]:
        with self._lock:
            if self._last is None or time.monotonic() - self._at >= CACHE_S:
                self._last = self._build()
                self._at = time.monotonic()
            return self._last

    def invalidate(self) -> None:
        """Build anew at the next look (an action changed what it shows)."""
        with self._lock:
            self._last = None
