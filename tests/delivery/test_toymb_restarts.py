"""ToyMB's Java driver restarted, as its users restart apps all the time: nothing is lost and
nothing is dead-lettered.

The consumer is a Java program (ToyMbReceiver.java, compiled here with javac) that does on the
wire what ToyMB-client does: a fresh subscriber id at every start, advertised with its address,
never an unsubscribe, and a 500 for a push to an id it does not know.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.delivery.toymb_app import JavaReceiver, compile_receiver, dead_lettered, send_as_toymb
from tests.support import NodeProcess, free_port, wait_until

LEASE_MS = 2000


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_receiver(tmp_path_factory)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    # A short lease, so that the receiver abandoned at its old port is dropped within the test.
    started = NodeProcess(tmp_path / "node", env={"TOYMB_SUBSCRIBER_LEASE_MS": str(LEASE_MS),
                                                   "TOYMB_PUSH_BACKOFF_MAX_MS": "500"}).start()
    yield started
    started.stop()


@pytest.mark.timeout(300)
def test_restarted_toymb_consumers_lose_nothing_on_the_same_port_or_a_new_one(classes: Path,
                                                                            node: NodeProcess) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", "billing"
    port = free_port()
    ids = set()
    for phase, listen in enumerate([port, port, free_port()]):
        app = JavaReceiver(classes, node.url, topic, group, listen)
        ids.add(app.sid)
        try:
            entities = [f"phase{phase}-m{i}" for i in range(50)]
            send_as_toymb(node.url, topic, entities)
            wait_until(lambda: set(entities) <= set(app.got), timeout=90,  # noqa: B023
                       what=f"phase {phase}: all 50 pushed to the restarted consumer")
        finally:
            app.kill()
        assert dead_lettered(node.url, topic) == 0, f"phase {phase} dead-lettered messages\n{node.log_tail(30)}"
    assert len(ids) == 3, "each start registered a fresh id, as ToyMB's driver does"
    members = requests.get(f"{node.url}/v1/topics/{topic}/groups/{group}", timeout=10).json()["subscribers"]
    assert len(members) <= 2, "the id a restart on the same port replaced is gone"
