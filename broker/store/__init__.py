"""SQL storage: the tables, the store interface over them, and engine set-up."""

from __future__ import annotations

from .sql import AppendTransaction, Store, Topic, TopicClaim, normalize_url, open_engine

__all__ = ["AppendTransaction", "Store", "Topic", "TopicClaim", "normalize_url", "open_engine"]
