"""SQL storage: the tables, the store interface over them, and engine set-up."""

from __future__ import annotations

from .sql import Store, Topic, normalize_url, open_engine

__all__ = ["Store", "Topic", "normalize_url", "open_engine"]
