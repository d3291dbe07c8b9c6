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


# Push subscribers keep their lease only by heartbeats (the driver sends them). A test about
# something else whose subscribers send none needs a lease that outlasts it: with the 2 s lease of
# ``live``, a run slowed past 2 s by a loaded machine lost its subscribers and waited for nobody.
STEADY_LEASE_MS = 600_000


@pytest.fixture
def steady(tmp_path: Path) -> Iterator[LiveNode]:
    """Like ``live``, with leases that outlast the test (for push subscribers that never heartbeat)."""
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS)
    yield node
    node.close()
