"""The store: every table and query of the broker, as typed repositories.

Each repository is a contract in ``protocols.py`` with a SQL implementation (SQLite, PostgreSQL, MariaDB)
and an in-memory twin (``memory://<name>``, one database per name in this process):

- :class:`~broker.store.protocols.MessageStore`: topics, partitions, message rows and the writer's
  append transaction: :class:`Store` (``sql.py``; its transaction ``append.py``, its engines
  ``engines.py``, its values ``records.py``), :class:`~broker.store.memory.MemoryStore`.
- :class:`~broker.store.protocols.GroupRepository`: subscribers, assignments, group offsets:
  :class:`~broker.store.groups.GroupStore`, the groups' rules, over the tables of either database
  (``group_tables.py``: ``sql_groups.py``, ``memory_groups.py``).
- :class:`~broker.store.protocols.ClusterRepository`: nodes and their heartbeats:
  :class:`~broker.store.cluster.ClusterStore`, :class:`~broker.store.memory_cluster.MemoryClusterStore`.
- :class:`~broker.store.protocols.JournalRepository`: the journal's ranges and offsets, retention:
  :class:`~broker.store.journal.JournalStore`, :class:`~broker.store.memory_journal.MemoryJournalStore`.
- ``errors.py``: what the database's failures mean to the rest of the broker.

:func:`open_repositories` opens all four on one database, as a node uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .append import AppendTransaction
from .cluster import ClusterStore
from .dialects import normalize_url
from .engines import background_checkpointer, open_engine
from .group_tables import NEVER_MS, Subscriber, now_ms
from .groups import AssignPolicy, GroupStore
from .journal import JournalStore
from .memory import SCHEME as MEMORY_SCHEME
from .memory import MemoryStore
from .memory_cluster import MemoryClusterStore
from .memory_journal import MemoryJournalStore
from .protocols import (
    AppendTx,
    ClusterRepository,
    GroupRepository,
    JournalRepository,
    MessageStore,
)
from .records import GivenId, Topic, TopicClaim
from .sql import Store

__all__ = ["MEMORY_SCHEME", "NEVER_MS", "AppendTransaction", "AppendTx", "AssignPolicy", "ClusterRepository", "GivenId",
           "GroupRepository", "JournalRepository", "MemoryStore", "MessageStore", "Repositories", "Store",
           "Subscriber", "Topic", "TopicClaim", "normalize_url", "now_ms", "open_engine", "open_repositories",
           "open_store"]


def open_store(url: str) -> MessageStore:
    """The message store at ``url``: ``memory://<name>``, ``sqlite:///<path>``, ``postgresql://...`` or
    ``mysql://...`` (MariaDB)."""
    if url.startswith(MEMORY_SCHEME):
        return MemoryStore(url)
    return Store(url)


@dataclass(frozen=True)
class Repositories:
    """The four repositories of one database, as a node uses them."""

    messages: MessageStore
    groups: GroupRepository
    cluster: ClusterRepository
    journal: JournalRepository


def open_repositories(url: str, assign: AssignPolicy) -> Repositories:
    """Every repository on the database at ``url`` (as :func:`open_store`), sharing one connection pool.

    ``assign`` is the groups' partition assignment policy (delivery's). On a SQLite file the
    store checkpoints its write-ahead log in the background, off the commits
    (:mod:`broker.store.checkpoint`).
    """
    if url.startswith(MEMORY_SCHEME):
        memory = MemoryStore(url)
        return Repositories(memory, GroupStore(memory, assign), MemoryClusterStore(memory),
                            MemoryJournalStore(memory))
    store = Store(url, checkpointer=background_checkpointer(url))
    return Repositories(store, GroupStore(store, assign), ClusterStore(store), JournalStore.of(store))
