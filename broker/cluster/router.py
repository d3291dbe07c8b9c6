"""``node.router``: who owns a topic, whether this node does, and forwarding to the owner."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from flask import Response

from ..config import Settings
from ..errors import NotOwner, Unavailable
from ..metrics import Metrics
from ..store import ClusterRepository
from . import ownership
from .forward import Forwarder, is_forwarded
from .ownership import Member

if TYPE_CHECKING:
    from .membership import Membership, View

log = logging.getLogger(__name__)

MAX_SCAN_TOPICS = 100_000  # topics read when recomputing what this node owns
RESCAN_SECONDS = 5.0  # recount owned topics this often even when the live set is unchanged

# Called with (gained, lost) topic names after a new live set changed what this node owns.
OwnershipListener = Callable[[set[str], set[str]], None]
# Owners remembered per live set, at most: every publish asks (twice: its request and its commit),
# and scoring a topic against each member (a hash and a Levenshtein distance) cost about 5 µs.
OWNER_MEMO_TOPICS = 16_384


class _OwnerMemo:
    """The owners of the topics asked about under one live set (a new set starts a new memo)."""

    __slots__ = ("live", "owners")

    def __init__(self, live: tuple[Member, ...]) -> None:
        self.live = live
        self.owners: dict[str, Member | None] = {}


class Router:
    """Owner lookup by Levenshtein rendezvous over the live set, and one-hop forwarding."""

    def __init__(self, me: Member, settings: Settings, metrics: Metrics, forwarder: Forwarder,
                 cluster_store: ClusterRepository, membership: Membership) -> None:
        self.me = me
        self.metrics = metrics
        self.cluster_store = cluster_store
        self.dlq_suffix = settings.dlq_suffix
        self.forwarder = forwarder
        self.membership = membership
        # Ownership listeners: the synchronous ones (caches that must not outlive a change) run
        # under the scan lock, before the others.
        self._sync_listeners: list[OwnershipListener] = []
        self.listeners: list[OwnershipListener] = []
        self.owned: frozenset[str] = frozenset()
        self._known: frozenset[str] = frozenset()
        self._last_scan = 0.0
        self._scan_lock = threading.Lock()
        self._memo = _OwnerMemo(())

    def subscribe(self, listener: OwnershipListener, *, synchronous: bool = False) -> None:
        """Call ``listener(gained, lost)`` after a new view changed what this node owns.

        A ``synchronous`` listener runs while the change is applied, before any request sees it.
        """
        (self._sync_listeners if synchronous else self.listeners).append(listener)
    # -- lookups ------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.membership.view.generation

    def _owner_in(self, topic: str, view: View) -> Member | None:
        live = view.live
        memo = self._memo
        if memo.live is not live:
            if memo.live != live:   # each reload makes a new tuple; only a different set starts over
                memo = self._memo = _OwnerMemo(live)
            else:
                memo.live = live
        try:
            return memo.owners[topic]
        except KeyError:
            pass
        found = ownership.owner(ownership.ownership_key(topic, self.dlq_suffix), live)
        if len(memo.owners) >= OWNER_MEMO_TOPICS:
            memo.owners.clear()
        memo.owners[topic] = found
        return found

    def owner_member(self, topic: str) -> Member | None:
        return self._owner_in(topic, self.membership.view)

    def owner_of(self, topic: str) -> str:
        """The name of the node that owns ``topic`` in this node's current view."""
        member = self.owner_member(topic)
        return self.me.name if member is None else member.name

    def owns(self, topic: str) -> bool:
        """Whether this node owns ``topic`` now: it is the owner in a view loaded within its lease."""
        return self.membership.lease_fresh() and self.owner_member(topic) == self.me

    def url_of(self, name: str) -> str | None:
        return self.membership.view.urls.get(name)

    # -- forwarding ---------------------------------------------------------------------------

    def forward_if_remote(self, topic: str) -> None | tuple[Response, int]:
        """None when this node should serve ``topic``; otherwise the owner's answer.

        Raises:
            NotOwner: the request was already forwarded once and this node is not the owner, or
                this node's own lease lapsed (503, retryable, names the owner this node sees).
            Unavailable: the owner cannot be reached (503, retryable).
        """
        if self.owns(topic):
            return None
        owner = self.owner_member(topic)
        if is_forwarded() or owner is None or owner == self.me:
            # Never a second hop; and a node whose lease lapsed must not serve nor guess.
            raise NotOwner(f"node {self.me.name} does not own topic {topic!r}; retry",
                           owner=owner.name if owner else None)
        url = self.url_of(owner.name)
        if url is None:
            raise Unavailable(f"no address known for node {owner.name}; retry", code="owner_unavailable",
                              owner=owner.name)
        return self.forwarder.forward(owner.name, url)

    def wake_membership(self) -> None:
        """Reload the live set now: this node's view may be the stale one."""
        self.membership.wake()

    def note_claimed(self, topic: str) -> None:
        """Count a topic this node just claimed (created since the last scan) as owned."""
        with self._scan_lock:
            if topic not in self.owned:
                self.owned = self.owned | {topic}
                self._known = self._known | {topic}
                self.metrics.owned_topics.set(len(self.owned))

    # -- reacting to new views ----------------------------------------------------------------

    def on_view(self, previous: View, view: View, was_lapsed: bool) -> None:
        """Called by membership after each reload: recompute what we own when something changed."""
        changed = previous.live != view.live or was_lapsed
        if changed:
            log.info("%s: live nodes %s%s", self.me.name, [m.name for m in view.live],
                     " (after our own lease lapsed)" if was_lapsed and previous.generation else "")
        if changed or time.monotonic() - self._last_scan >= RESCAN_SECONDS:
            self.rescan(lost_everything=was_lapsed)

    def rescan(self, *, lost_everything: bool = False) -> None:
        """Recount owned topics; release claims, drop cached offsets and notify on gains/losses."""
        with self._scan_lock:
            self._last_scan = time.monotonic()
            names = self.cluster_store.topic_names(MAX_SCAN_TOPICS)
            owned = frozenset(t for t in names if self._owner_in(t, self.membership.view) == self.me)
            before = frozenset() if lost_everything else self.owned
            gained, lost = set(owned - before), set(before - owned)
            known = self._known
            self.owned, self._known = owned, frozenset(names)
            metrics = self.metrics
            metrics.owned_topics.set(len(owned))
            if gained & known:
                metrics.ownership_changes.labels("gained").inc(len(gained & known))
            if lost:
                metrics.ownership_changes.labels("lost").inc(len(lost))
            changed = gained | lost
            if not changed:
                return
            for sync_listener in self._sync_listeners:
                sync_listener(gained, lost)
        if gained & known or lost:
            log.info("%s: gained %d topics, lost %d", self.me.name, len(gained & known), len(lost))
        for listener in list(self.listeners):
            try:
                listener(gained, lost)
            except Exception:
                log.exception("ownership listener failed")
