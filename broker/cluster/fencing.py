"""The epoch fence: run inside every append transaction, before a row is written.

``toymb_topics`` holds, per topic, the node that sequences it (``owner``) and the ``epoch`` it
claimed it at. The appender calls :class:`Fence` inside its write transaction, which:

1. locks the topic's row (``SELECT ... FOR UPDATE`` on PostgreSQL and MariaDB; SQLite has one writer anyway),
   so appends to one topic from different nodes are serialised and each sees the last commit;
2. refuses (503 ``not_owner``) unless this node owns the topic now, by rendezvous over a live
   set loaded within its own lease;
3. passes when the row still says ``owner = me, epoch = the epoch I claimed``;
4. otherwise claims the topic with a compare-and-set ``UPDATE ... SET epoch = epoch + 1``, and
   the writer drops its cached offsets, so the next offsets come from what the previous owner
   committed. The claim is believed only once the transaction commits (the appender runs what
   the fence returns after its commit): a claim whose commit failed is simply made again by the
   next append, instead of being remembered as ours while the row still says otherwise.

A former owner that was paused keeps a stale epoch: its own lease lapsed, so step 2 refuses it,
and when it is live again it must claim a new epoch before writing. If someone else claimed a
topic we still believe is ours, our view may be the stale one: we refuse and reload the live
set before claiming it back, instead of stealing it back and forth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import NotOwner
from ..store import AppendTx

if TYPE_CHECKING:
    from .router import Router

log = logging.getLogger(__name__)


class Fence:
    """The epoch check the writer runs in every append transaction (its ``fence``)."""

    def __init__(self, router: Router, lease_ms: int) -> None:
        self.router = router
        self.lease_ms = lease_ms
        self._lock = threading.Lock()
        self._epochs: dict[str, int] = {}  # topic -> epoch this node claimed and still holds
        self._conflicts: dict[str, int] = {}  # topic -> view generation when someone took it

    def release(self, gained: set[str], lost: set[str]) -> None:
        """Forget our claims on topics gained or lost in a new view: the next append re-claims them.

        A synchronous ownership listener of the router.
        """
        with self._lock:
            for name in gained | lost:
                self._epochs.pop(name, None)
                self._conflicts.pop(name, None)

    def epoch(self, topic: str) -> int | None:
        with self._lock:
            return self._epochs.get(topic)

    def lock(self, txn: AppendTx, topics: Sequence[str]) -> None:
        """Lock the rows of every topic the commit writes in one statement, before checking each."""
        txn.lock_topics(topics, self.lease_ms)

    def __call__(self, txn: AppendTx, topic: str) -> Callable[[], None] | None:
        """Check (or claim) ``topic`` inside the append transaction ``txn``.

        Returns what to run once that transaction has committed when it claimed the topic (the
        writer then drops its cached offsets of the topic first), or None.

        Raises:
            NotOwner: this node may not write ``topic`` now (503, retryable).
        """
        # A frozen node must not hold the topic's lock past its lease, or it would block the next owner.
        row = txn.lock_topic(topic, self.lease_ms)
        if row is None:
            return None  # not created yet: the writer creates topics before appending, so nothing to fence
        router = self.router
        if not router.owns(topic):
            raise NotOwner(f"this node does not own topic {topic!r} now; retry", owner=router.owner_of(topic))
        me = router.me.name
        epoch = row.epoch
        with self._lock:
            mine = self._epochs.get(topic)
            if row.owner == me and epoch == mine:
                return None
            generation = router.generation
            if mine is not None:
                # Someone claimed the topic after us while we still think it is ours: re-check the
                # live set before claiming it back.
                seen = self._conflicts.setdefault(topic, generation)
                if generation <= seen:
                    router.wake_membership()
                    raise NotOwner(f"topic {topic!r} was claimed by {row.owner}; retry",
                                   owner=row.owner or router.owner_of(topic))
        if not txn.claim_topic(topic, me, row):
            raise NotOwner(f"topic {topic!r} changed hands concurrently; retry", owner=router.owner_of(topic))

        def committed() -> None:
            with self._lock:
                self._epochs[topic] = epoch + 1
                self._conflicts.pop(topic, None)
            router.note_claimed(topic)
            log.info("%s claimed topic %s at epoch %d (was %s at %d)", me, topic, epoch + 1, row.owner, epoch)

        return committed
