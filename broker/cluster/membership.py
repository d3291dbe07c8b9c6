"""Node registration, heartbeats and the live set, all in the shared database.

Each node upserts its row in ``toymb_nodes`` (id = sha1 of its name, so a restart is the same
node) and moves ``heartbeat_ms`` forward every ``settings.heartbeat_ms``. A node is live while its
last heartbeat is within ``settings.node_lease_ms`` of *the database's* clock, so the nodes'
own clocks never have to agree.

A node also watches its own lease with a local monotonic clock: if it could not heartbeat for a
lease period (a SIGSTOP, a GC pause, a lost database), it stops claiming to own anything until a
fresh heartbeat is written and the live set is reloaded. That is what keeps a paused former owner
from pushing; the epoch fence (``fencing.py``) keeps it from appending.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from ..background import Worker
from ..config import Settings
from ..store import ClusterRepository
from ..store.cluster import LastBeat, NodeRow
from .forward import CLUSTER_TOKEN_HEADER
from .ownership import Member

log = logging.getLogger(__name__)

MAX_NODES = 1000  # rows read per reload; far more than any cluster this broker is meant for

@dataclass(frozen=True)
class View:
    """One reload of the node table: every registered node and the live members."""

    rows: tuple[NodeRow, ...] = ()
    live: tuple[Member, ...] = ()
    urls: dict[str, str] = field(default_factory=dict)
    db_now_ms: int = 0
    generation: int = 0


# Called after each reload with (previous view, new view, whether our own lease had lapsed).
ViewListener = Callable[[View, View, bool], None]


def peer_url(peer: str) -> str:
    """ToyMB wrote peers as ``host:port``; accept that and full URLs."""
    peer = peer.strip().rstrip("/")
    return peer if "://" in peer else f"http://{peer}"


class Membership:
    """The background service that registers this node and keeps the live set fresh."""

    def __init__(self, cluster_store: ClusterRepository, me: Member, url: str, settings: Settings) -> None:
        self.settings = settings
        self.cluster_store = cluster_store
        self.me = me
        self.url = url
        self.interval = self.settings.heartbeat_ms / 1000.0
        self.lease = self.settings.node_lease_ms / 1000.0
        self.view = View()
        self._joined = False
        self.peer_status: dict[str, str] = {}
        self._view_listeners: list[ViewListener] = []
        self._lease_deadline = 0.0  # monotonic time at which our own lease lapses
        self._lapsed = True  # our lease lapsed since the view was loaded (or nothing loaded yet)
        self._worker = Worker("toymb-membership", self._run)
        self._started_ms = int(time.time() * 1000)
        self._registered = False

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Register and load the live set before the node serves, then heartbeat in the background."""
        if self.settings.heartbeat_ms * 2 > self.settings.node_lease_ms:
            log.warning("heartbeat_ms=%d is more than half of node_lease_ms=%d: nodes may flap",
                        self.settings.heartbeat_ms, self.settings.node_lease_ms)
        self.tick()
        self._joined = True
        self._worker.start()
        if self.settings.peers:
            threading.Thread(target=self._check_peers, name="toymb-peers", daemon=True).start()

    def stop(self) -> None:
        """Stop heartbeating and mark this node dead, so the others take over at once."""
        self._joined = False
        self._worker.stop()
        self._lease_deadline = 0.0
        try:
            self.cluster_store.mark_gone(self.me.id)
        except Exception as exc:  # noqa: BLE001 - the lease expires by itself anyway
            log.info("could not mark %s as stopped: %s", self.me.name, exc)

    def subscribe(self, listener: ViewListener) -> None:
        """Call ``listener(previous, view, was_lapsed)`` after each reload of the live set."""
        self._view_listeners.append(listener)

    @property
    def ready(self) -> bool:
        """Registered, and the live set was loaded within our own current lease (``/ready``)."""
        return self._joined and self.lease_fresh()

    def wake(self) -> None:
        """Reload the live set now instead of at the next heartbeat."""
        self._worker.wake.set()

    def lease_fresh(self) -> bool:
        """Whether our own lease is current and the view was loaded after it was renewed."""
        return not self._lapsed and time.monotonic() < self._lease_deadline

    # -- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._worker.stopping.is_set():
            self._worker.wake.wait(self.interval)
            self._worker.wake.clear()
            if self._worker.stopping.is_set():
                return
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - keep heartbeating; the lease says the rest
                log.warning("heartbeat of %s failed: %s", self.me.name, exc)

    def tick(self) -> None:
        """Write a heartbeat, then reload the live set."""
        if time.monotonic() >= self._lease_deadline:
            self._lapsed = True
        started = time.monotonic()
        self._beat()
        # The lease counts from before the write: the database stamped it no earlier than this.
        deadline = started + self.lease
        view = self._load()
        was_lapsed = self._lapsed
        # A loaded view is only trusted when it was read inside the lease it follows.
        if time.monotonic() >= deadline:
            log.warning("%s: heartbeat and reload took longer than the lease", self.me.name)
            return
        previous, self.view = self.view, view
        self._lease_deadline = deadline
        self._lapsed = False
        for listener in self._view_listeners:
            listener(previous, view, was_lapsed)

    def _beat(self) -> None:
        beat = self.cluster_store.beat(self.me.id, self.me.name, self.url, self._started_ms,
                                       register=not self._registered)
        if not self._registered:
            self._warn_if_name_taken(beat.previous, beat.now_ms)
        if beat.outcome == "inserted":
            log.info("node %s registered as %s at %s", self.me.name, self.me.id, self.url)
        if beat.outcome != "raced":  # after a race, the next heartbeat registers again
            self._registered = True

    def _warn_if_name_taken(self, row: LastBeat | None, now: int) -> None:
        fresh = row is not None and row.heartbeat_ms >= now - self.settings.node_lease_ms
        if row is not None and fresh and row.url != self.url:
            log.error("node name %s is also used by a live node at %s: every node needs its own name "
                      "(TOYMB_NODE_NAME), or the two will fight over the same topics", self.me.name, row.url)

    def _load(self) -> View:
        table = self.cluster_store.read_nodes(self.settings.node_lease_ms, MAX_NODES)
        now, rows = table.now_ms, table.rows
        live = tuple(sorted((Member(r.name, r.id) for r in rows if r.alive), key=lambda m: m.name))
        if self.me not in live:  # we just heartbeat: only a clock oddity could hide us
            live = tuple(sorted((*live, self.me), key=lambda m: m.name))
        urls = {r.name: r.url for r in rows if r.alive}
        urls[self.me.name] = self.url
        return View(rows, live, urls, now, self.view.generation + 1)

    # -- bootstrap peers --------------------------------------------------------------------------

    def _check_peers(self) -> None:
        """Check that each configured peer shares our database (it lists us in /v1/cluster).

        Peers are optional when the database is shared; a peer that answers but still does not
        know us after it has had time to reload its live set is a misconfiguration (two
        clusters), which is logged rather than guessed around.
        """
        pending = {peer_url(p) for p in self.settings.peers} - {self.url}
        patience = self.lease + 3 * self.interval  # a peer reloads its live set every heartbeat
        first_answer: dict[str, float] = {}
        deadline = time.monotonic() + max(30.0, self.lease * 5)
        token = self.settings.cluster_token
        headers = {CLUSTER_TOKEN_HEADER: token} if token else {}
        while pending and not self._worker.stopping.is_set() and time.monotonic() < deadline:
            for url in sorted(pending):
                try:
                    answer = requests.get(url + "/v1/cluster", headers=headers, timeout=2).json()
                except (requests.RequestException, ValueError):
                    self.peer_status[url] = "unreachable"
                    continue
                ids = {n.get("id") for n in answer.get("nodes", []) if isinstance(n, dict)}
                if self.me.id in ids:
                    self.peer_status[url] = "ok"
                    pending.discard(url)
                elif time.monotonic() - first_answer.setdefault(url, time.monotonic()) > patience:
                    self.peer_status[url] = "other_cluster"
                    log.error("peer %s does not list this node: the nodes must share one database "
                              "(datasource.url / TOYMB_DATABASE_URL)", url)
                    pending.discard(url)
                else:
                    self.peer_status[url] = "checking"
            self._worker.stopping.wait(min(1.0, self.interval))
        for url in pending:
            log.warning("peer %s did not answer at startup", url)
