"""Fixtures of the delivery tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.delivery.support import LiveNode


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveNode]:
    """An in-process node with fast retries and short leases, on a real loopback socket."""
    node = LiveNode(tmp_path)
    yield node
    node.close()
