"""Logging set-up shared by the ``toymb`` commands (the node, the journal job, the bridges)."""

from __future__ import annotations

import logging


def setup_logging(level: str) -> None:
    """Log to stderr at ``level`` (DEBUG, INFO, WARNING or ERROR), one line per record with time and logger."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
