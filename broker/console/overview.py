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

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import NotFound
from .progress import ProgressTracker

if TYPE_CHECKING:
    from ..node import Node
    from ..security.tokens import Grant
    from .remote import Remotes

MAX_TOPICS = 500
MAX_GROUPS = 200
# One overview serves every viewer for this long: ten open consoles cost the store one build.
CACHE_S = 0.5


def cluster_section(node: Node) -> dict[str, Any]:
    """The registered nodes as this node last read them, with the age of each one's heartbeat."""
    view = node.membership.view
    now = view.db_now_ms
    nodes = [{"name": r.name, "id": r.id, "url": r.url, "alive": r.alive,
              "lease_age_ms": max(0, now - r.heartbeat_ms), "started": r.started_ms}
             for r in sorted(view.rows, key=lambda r: r.name)]
    return {"answered_by": node.name, "lease_ms": node.settings.node_lease_ms, "checked_at": now,
            "lease_fresh": node.membership.lease_fresh(), "live": sorted(m.name for m in view.live), "nodes": nodes}


def _sums(ends: dict[tuple[str, int], int]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for (topic, _), end in ends.items():
        totals[topic] = totals.get(topic, 0) + end
    return totals


def topics_and_journal(node: Node) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """The topics (owner, epoch, end offsets, dead-letter depth) and the journal's offsets per topic."""
    all_topics = node.store.list_topics()
    truncated = len(all_topics) > MAX_TOPICS
    shown = sorted(all_topics, key=lambda t: t.name)[:MAX_TOPICS]
    if node.journal is not None:
        ends = node.journal.end_offsets()
        journaled = node.journal.journaled_offsets()
    else:  # a node built without the journal repository (tests): no journal section
        ends = {(t.name, p): e for t in shown for p, e in node.store.end_offsets(t.name).items()}
        journaled = {}
    end_totals = _sums(ends)
    suffix = node.settings.dlq_suffix
    topics = []
    journal_rows: list[dict[str, Any]] = []
    for topic in shown:
        dlq = topic.name + suffix
        topics.append({"name": topic.name, "partitions": topic.partitions, "owner": node.router.owner_of(topic.name),
                       "claimed_by": topic.owner, "epoch": topic.epoch, "end": end_totals.get(topic.name, 0),
                       "dlq": dlq if dlq in end_totals else None, "dlq_depth": end_totals.get(dlq, 0)})
        done = lag = 0
        for p in range(topic.partitions):
            end, at = ends.get((topic.name, p), 0), journaled.get((topic.name, p), 0)
            done += min(at, end)
            lag += max(0, end - at)
        journal_rows.append({"topic": topic.name, "journaled": done, "end": end_totals.get(topic.name, 0),
                             "lag": lag})
    journal: dict[str, Any] = {"topics": journal_rows, "lag": sum(int(r["lag"]) for r in journal_rows),
                               "journaled": sum(int(r["journaled"]) for r in journal_rows)}
    return topics, journal, truncated


def groups_section(node: Node, tracker: ProgressTracker, now_ms: int) -> tuple[list[dict[str, Any]], bool]:
    """Every group: members, total lag, its lagging partitions (stuck ones flagged) and push state."""
    delivery = node.delivery
    pairs = sorted(delivery.groups.all_groups())
    truncated = len(pairs) > MAX_GROUPS
    push = delivery.dispatcher.push_state()
    lagging: set[tuple[str, str, int]] = set()
    groups = []
    for topic, group in pairs[:MAX_GROUPS]:
        try:
            described = delivery.describe(topic, group)
        except NotFound:
            continue  # left between the two reads
        rows = []
        for row in described["partitions"]:
            if not row["lag"]:
                tracker.observe((topic, group, row["partition"]), row["committed"], 0, now_ms)
                continue
            key = (topic, group, int(row["partition"]))
            lagging.add(key)
            progress = tracker.observe(key, int(row["committed"]), int(row["lag"]), now_ms)
            rows.append({"partition": row["partition"], "committed": row["committed"], "end": row["end"],
                         "lag": row["lag"], "subscriber": row["subscriber"], "stuck": progress.stuck,
                         "idle_ms": progress.idle_ms, "growing": progress.growing})
        rows.sort(key=lambda r: (not r["stuck"], -r["lag"]))
        modes = sorted({s["mode"] for s in described["subscribers"]})
        groups.append({"topic": topic, "group": group, "modes": modes, "subscribers": described["subscribers"],
                       "total_lag": described["total_lag"], "stuck": sum(1 for r in rows if r["stuck"]),
                       "lagging": rows, "push": push.get((topic, group)),
                       "dispatched_by": node.name if (topic, group) in push else None})
    tracker.forget_except(lagging)
    return groups, truncated


def build(node: Node, tracker: ProgressTracker, remotes: Remotes) -> dict[str, Any]:
    """The whole overview, for every topic (filter it per viewer with :func:`for_grant`)."""
    now_ms = int(time.time() * 1000)
    topics, journal, topics_cut = topics_and_journal(node)
    groups, groups_cut = groups_section(node, tracker, now_ms)
    journal["health"] = remotes.journal()
    return {"node": node.name, "checked_ms": now_ms, "refresh_ms": node.settings.console_refresh_ms,
            "stuck_after_ms": tracker.stuck_after_ms, "cluster": cluster_section(node), "topics": topics,
            "groups": groups, "journal": journal, "bridges": remotes.bridges(),
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
