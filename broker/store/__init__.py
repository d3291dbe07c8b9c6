"""The store: every table and query of the broker, as typed repositories.

- :class:`Store` (``sql.py``): topics, partitions, message rows and the writer's append
  transaction, on SQLite or PostgreSQL; :class:`~broker.store.memory.MemoryStore` is its in-memory
  twin, and :class:`~broker.store.protocols.MessageStore` the contract both keep.
- :class:`~broker.store.groups.GroupStore`: subscribers, assignments, group offsets.
- :class:`~broker.store.cluster.ClusterStore`: nodes and their heartbeats.
- :class:`~broker.store.journal.JournalStore`: the journal's ranges and offsets, retention.
- ``errors.py``: what the database's failures mean to the rest of the broker.
"""

from __future__ import annotations

from .memory import SCHEME as MEMORY_SCHEME
from .memory import MemoryStore
from .protocols import AppendTx, MessageStore
from .sql import AppendTransaction, Store, Topic, TopicClaim, normalize_url, open_engine

__all__ = ["AppendTransaction", "AppendTx", "MemoryStore", "MessageStore", "Store", "Topic", "TopicClaim",
           "normalize_url", "open_engine", "open_store"]


def open_store(url: str) -> MessageStore:
    """The message store at ``url``: ``memory://<name>``, ``sqlite:///<path>`` or ``postgresql://...``."""
    if url.startswith(MEMORY_SCHEME):
        return MemoryStore(url)
    return Store(url)
