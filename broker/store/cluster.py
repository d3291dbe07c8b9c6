"""The cluster's tables as a typed repository: node registrations and heartbeats, and topic names.

:class:`ClusterStore` is all the SQL that :mod:`broker.cluster.membership` and
:mod:`broker.cluster.router` run (the epoch fence runs its own inside the append transaction).
Every method takes and returns plain values; times are ms since the epoch by *the database's*
clock (:func:`db_now_ms`), the one clock every node shares. Its in-memory twin
(``memory_cluster.py``) reads the node table through the same :func:`node_table`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, select, text
from sqlalchemy.exc import IntegrityError

from .dialects import now_sql
from .schema import nodes, topics
from .sql import Store

# How a heartbeat reached the node's row: it updated it, inserted it, or lost an insert race and
# updated it then (a second process with the same node id registered concurrently).
BeatOutcome = Literal["updated", "inserted", "raced"]


def db_now_ms(conn: Connection) -> int:
    """The database server's clock in ms since the epoch (the one clock every node shares)."""
    sql = now_sql(conn.dialect.name)
    if sql is None:
        return int(time.time() * 1000)
    return int(conn.execute(text(sql)).scalar_one())


@dataclass(frozen=True)
class NodeRow:
    """One registered node; ``alive`` when its last heartbeat is within the lease of the read."""

    id: str
    name: str
    url: str
    heartbeat_ms: int
    started_ms: int
    alive: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "url": self.url, "alive": self.alive,
                "last_heartbeat": self.heartbeat_ms, "started": self.started_ms}


@dataclass(frozen=True)
class LastBeat:
    """The address and last heartbeat a node row held before a registering heartbeat."""

    url: str
    heartbeat_ms: int


@dataclass(frozen=True)
class Beat:
    """What one heartbeat did.

    ``previous`` is the row as found before the heartbeat, read in the same transaction as the
    first update; it is only read by a registering heartbeat, and None when there was no row.
    """

    now_ms: int
    outcome: BeatOutcome
    previous: LastBeat | None = None


@dataclass(frozen=True)
class NodeTable:
    """One read of the node table: the database clock at the read and the rows, latest heartbeat first."""

    now_ms: int
    rows: tuple[NodeRow, ...]


def node_table(now_ms: int, lease_ms: int, rows: Iterable[tuple[str, str, str, int, int]]) -> NodeTable:
    """The node rows (id, name, url, heartbeat, started) as read at ``now_ms``, in their order.

    A node is alive when its last heartbeat is within ``lease_ms`` of the read.
    """
    return NodeTable(now_ms, tuple(NodeRow(i, name, url, int(beat), int(started), int(beat) >= now_ms - lease_ms)
                                   for i, name, url, beat, started in rows))


class ClusterStore:
    """Node registrations and heartbeats (``toymb_nodes``) and topic names, over a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine

    def beat(self, node_id: str, name: str, url: str, started_ms: int, *, register: bool) -> Beat:
        """Upsert the node's row with a heartbeat at the database's current time.

        With ``register`` (the node's first heartbeat, or the first since a race), the update also
        resets ``started_ms`` and the row's previous ``url`` and ``heartbeat_ms`` are read first,
        in the same transaction, and returned in :attr:`Beat.previous`. A missing row is inserted
        (with ``started_ms``) in a second transaction; if another process inserts it first, a
        third transaction updates it instead (outcome ``"raced"``).
        """
        previous: LastBeat | None = None
        with self.engine.begin() as conn:
            now = db_now_ms(conn)
            values: dict[str, Any] = {"name": name, "url": url, "heartbeat_ms": now}
            if register:
                row = conn.execute(select(nodes.c.url, nodes.c.heartbeat_ms).where(nodes.c.id == node_id)).first()
                if row is not None:
                    previous = LastBeat(row.url, int(row.heartbeat_ms))
                values["started_ms"] = started_ms
            if conn.execute(nodes.update().where(nodes.c.id == node_id).values(**values)).rowcount == 1:
                return Beat(now, "updated", previous)
            values.pop("started_ms", None)
        try:
            with self.engine.begin() as conn:
                conn.execute(nodes.insert().values(id=node_id, started_ms=started_ms, **values))
            return Beat(now, "inserted", previous)
        except IntegrityError:  # registered concurrently (a second process with this node id?)
            with self.engine.begin() as conn:
                conn.execute(nodes.update().where(nodes.c.id == node_id).values(**values))
            return Beat(now, "raced", previous)

    def mark_gone(self, node_id: str) -> None:
        """Set the node's heartbeat to 0, so the other nodes see it dead at once."""
        with self.engine.begin() as conn:
            conn.execute(nodes.update().where(nodes.c.id == node_id).values(heartbeat_ms=0))

    def read_nodes(self, lease_ms: int, limit: int) -> NodeTable:
        """At most ``limit`` node rows, latest heartbeat first; alive if they beat within ``lease_ms``."""
        c = nodes.c
        with self.engine.connect() as conn:
            now = db_now_ms(conn)
            result = conn.execute(select(c.id, c.name, c.url, c.heartbeat_ms, c.started_ms)
                                  .order_by(c.heartbeat_ms.desc()).limit(limit))
            return node_table(now, lease_ms, result.tuples())

    def topic_names(self, limit: int) -> list[str]:
        """The names of at most ``limit`` topics, in name order."""
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(select(topics.c.name).order_by(topics.c.name).limit(limit))]
