"""Fixtures for the driver tests: real node processes, unique topic names, a clean environment."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver import Template
from tests.support import NodeProcess

# Pushes may go to loopback receivers; retries and redelivery are quick so tests stay short.
NODE_ENV = {
    "TOYMB_PUSH_ALLOW": "127.0.0.0/8,localhost",
    "TOYMB_PUSH_BACKOFF_MS": "50",
    "TOYMB_PUSH_BACKOFF_MAX_MS": "400",
    "TOYMB_PUSH_TIMEOUT_MS": "3000",
    "TOYMB_REDELIVERY_MS": "1500",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own TOYMB_* settings must not leak into what the driver reads."""
    import os

    for name in list(os.environ):
        if name.startswith("TOYMB_") and not name.startswith("TOYMB_TEST_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One real node shared by a test module."""
    proc = NodeProcess(tmp_path_factory.mktemp("node"), env=NODE_ENV).start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node of this test's own."""
    proc = NodeProcess(tmp_path / "node", env=NODE_ENV).start()
    yield proc
    proc.stop()


@pytest.fixture
def template(node: NodeProcess) -> Iterator[Template]:
    with Template(node.url, timeout=(2.0, 10.0)) as t:
        yield t


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def stored_count(template: Template, topic: str) -> int:
    """How many messages ``topic`` holds, from its end offsets."""
    return sum(int(v) for v in template.topic_info(topic)["end_offsets"].values())
