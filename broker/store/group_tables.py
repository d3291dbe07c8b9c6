"""Consumer groups' storage primitives: the seam between the groups' rules and a database.

:class:`~broker.store.groups.GroupStore` holds every rule of consumer groups (who may join, how a
rebalance runs, the fair windowed read) and stores through :class:`GroupTables`, which only keeps
rows: :class:`~broker.store.sql_groups.SqlGroupTables` on SQLite, PostgreSQL or MariaDB and
:class:`~broker.store.memory_groups.MemoryGroupTables` in memory. Each primitive is one
transaction. The value types the groups' callers use (:class:`Subscriber`, :data:`NEVER_MS`,
:func:`now_ms`) are defined here, below both sides of the seam.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..envelope import MessageRow

# Lease of ToyMB-compatible push subscribers: ToyMB's driver never heartbeats, so their lease ends
# only when the broker revokes it (the receiver keeps failing).
NEVER_MS = 1 << 62

# Offset windows of a read: partition -> (first offset, how many offsets from there).
Windows = dict[int, tuple[int, int]]

# A rebalance's plan: (live subscriber ids, current assignment) -> the new assignment.
Plan = Callable[[list[str], dict[int, str]], dict[int, str]]


def now_ms() -> int:
    return int(time.time() * 1000)


def revoked_lease(at_ms: int) -> int:
    """The lease of a push subscriber the broker dropped at ``at_ms`` because it kept failing.

    It is -(when it was revoked): in the past, so heartbeats cannot renew it (registering again
    can), and, like an expired one, it is remembered for an hour after that moment.
    """
    return -max(1, at_ms)


@dataclass(frozen=True)
class Subscriber:
    id: str
    topic: str
    group: str
    mode: str
    url: str | None
    compat: bool
    lease_until_ms: int

    @property
    def revoked(self) -> bool:
        return self.lease_until_ms <= 0

    def live(self, at_ms: int | None = None) -> bool:
        return self.lease_until_ms >= (now_ms() if at_ms is None else at_ms)

    def to_json(self, partitions: list[int]) -> dict[str, Any]:
        lease = None if self.lease_until_ms >= NEVER_MS or self.revoked else self.lease_until_ms
        return {"id": self.id, "mode": self.mode, "url": self.url, "compat": self.compat,
                "live": self.live(), "revoked": self.revoked, "lease_until_ms": lease, "partitions": partitions}


class Positioned(Protocol):
    """Anything read from a partition at an offset."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


class SizedRow(Positioned, Protocol):
    """A message's place and weight (see :meth:`GroupTables.sizes`), read without its body."""

    @property
    def size(self) -> int: ...


class StoredRow(NamedTuple):
    """A stored message as every backend reads it, with the attributes of :class:`~broker.envelope.MessageRow`.

    A plain tuple, not a database driver's row: a push reads each message's attributes several
    times, and a tuple's cost a fraction of a SQLAlchemy row's. The fields are the columns of
    ``toymb_messages`` in table order.
    """

    topic: str
    partition: int
    offset: int
    id: str
    key: str | None
    headers: str
    content_type: str
    body: bytes
    timestamp: int


class StoredSize(NamedTuple):
    """Where a message is and the bytes it stores (:meth:`GroupTables.sizes`)."""

    partition: int
    offset: int
    size: int


class GroupTables(Protocol):
    """The rows of subscribers, assignments and group offsets, and the message windows groups read."""

    # -- subscribers ----------------------------------------------------------------------------
    def get(self, sid: str) -> Subscriber | None: ...
    def topic_of(self, sid: str) -> str | None: ...
    def members(self, topic: str, group: str) -> list[Subscriber]:
        """The group's subscribers, live or not, by id."""
    def set_lease(self, sid: str, lease_until_ms: int) -> None: ...
    def delete_subscriber(self, topic: str, group: str, sid: str) -> bool:
        """Delete ``sid`` if it belongs to ``group`` of ``topic``; whether it did."""
    def purge(self, before_ms: int) -> int:
        """Delete subscribers whose lease ended, or that were revoked, before ``before_ms``; how many."""
    def stale_groups(self, at_ms: int) -> list[tuple[str, str]]:
        """Groups where an expired or deleted subscriber still holds partitions."""
    def expired_between(self, since_ms: int, at_ms: int) -> list[tuple[str, str]]:
        """Groups of subscribers whose lease ended in [since_ms, at_ms)."""
    def live_groups(self, at_ms: int, mode: str | None) -> list[tuple[str, str]]:
        """Groups with a subscriber (of ``mode`` when given) live at ``at_ms``."""
    def all_groups(self) -> list[tuple[str, str]]:
        """Groups with committed offsets."""

    # -- assignment -----------------------------------------------------------------------------
    def reassign(self, topic: str, group: str, at_ms: int, plan: Plan) -> dict[int, str]:
        """In one transaction: ``plan`` over the subscribers live at ``at_ms`` and the current
        assignment; store the new assignment and return it."""
    def join(self, subscriber: Subscriber, created_ms: int | None, at_ms: int, plan: Plan) -> dict[int, str] | None:
        """In one transaction: insert ``subscriber`` (new, with ``created_ms``) or, with ``created_ms``
        None, store the mode, url, compat flag and lease of the existing one; then :meth:`reassign`.
        None, and nothing written, when a new subscriber's id was taken meanwhile."""
    def assignment(self, topic: str, group: str) -> dict[int, str]: ...
    def partitions_of(self, sid: str) -> list[int]: ...

    # -- offsets --------------------------------------------------------------------------------
    def committed(self, topic: str, group: str) -> dict[int, int]: ...
    def insert_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        """Give a new group these starting offsets; offsets stored meanwhile by another registration stand."""
    def advance_offsets(self, topic: str, group: str, next_offsets: dict[int, int], *,
                        durable: bool = True) -> dict[int, int]:
        """Move committed offsets up to ``next_offsets`` where that is forward; the previous offsets
        of the partitions that moved. Not ``durable``: the commit need not wait for the disk (a
        power loss may take it back), see :meth:`broker.store.sql.Store.lazy_engine`."""
    def lag_sums(self, topics: Sequence[str]) -> dict[tuple[str, str], int]:
        """Per (topic, group) of ``topics``: the sum over its partitions of end minus committed offset."""
    def lagging(self, topics: Sequence[str]) -> dict[tuple[str, str], dict[int, tuple[int, int]]]:
        """Per (topic, group) of ``topics``: each partition whose end is past the committed offset,
        as partition -> (committed offset, end offset); groups without lag are left out."""
    def set_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        """Store these committed offsets whatever they were, back or forward (a seek)."""
    def offsets_since(self, topic: str, partitions: Sequence[int], timestamp_ms: int) -> dict[int, int]:
        """Per partition, the smallest stored offset whose message's timestamp is at least ``timestamp_ms``
        (partitions with none are left out)."""

    # -- delivery options -----------------------------------------------------------------------
    def options(self, topic: str, group: str) -> dict[str, str]:
        """The group's stored options: scope ("" for the group, else a subscriber id) -> JSON text."""
    def put_options(self, topic: str, group: str, scope: str, text: str | None) -> None:
        """Store (or with None delete) the options of one scope."""

    # -- message windows ------------------------------------------------------------------------
    def rows(self, topic: str, windows: Windows) -> Sequence[MessageRow]:
        """The stored messages in the offset windows, in no particular order."""
    def sizes(self, topic: str, windows: Windows) -> Sequence[SizedRow]:
        """Like :meth:`rows`, but only where each message is and the bytes it stores (body, headers,
        id, key, content type)."""
    def first_offsets(self, topic: str, starts: dict[int, int]) -> dict[int, int]:
        """Per partition of ``starts``, the smallest stored offset at or after its start, where there is one."""
