"""ToyMB's Java apps, which cannot send a token, against a secured 3-node cluster that admits their
network (``legacy_networks``) for the ToyMB endpoints, and for nothing else."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.cluster.harness import Cluster, owner_name, private_database
from tests.delivery.toymb_app import JavaReceiver, compile_receiver, dead_lettered, send_as_toymb
from tests.support import free_port, wait_until

ROOT_TOKEN = "root-secret-5d1"


@pytest.fixture
def secured(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    env = {"TOYMB_TOKENS": f"{ROOT_TOKEN}=admin", "TOYMB_CLUSTER_TOKEN": "cluster-secret-9a",
           "TOYMB_LEGACY_NETWORKS": "127.0.0.0/8=publish+consume@orders-*"}
    nodes = Cluster(tmp_path, private_database(pg_url), env, token=ROOT_TOKEN)
    try:
        yield nodes.start()
    finally:
        nodes.stop()


@pytest.mark.timeout(300)
def test_a_toymb_app_works_against_a_secured_cluster_from_an_admitted_network(
        secured: Cluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    owner = owner_name(topic)
    others = [n for n in secured.nodes if n != owner]
    # Tokens are on: everything but the ToyMB endpoints still needs one, from any network.
    assert requests.post(f"{secured.url(others[0])}/v1/topics/{topic}/messages", json={"body": 1},
                         timeout=10).status_code == 401
    assert requests.get(f"{secured.url(others[0])}/metrics", timeout=10).status_code == 401
    # The admitted scope holds: another topic is refused, even on a ToyMB endpoint.
    refused = requests.post(f"{secured.url(others[1])}/sendmessage", timeout=10,
                            json={"id": None, "topicName": "billing", "key": "k", "body": "x", "requestor": None})
    assert refused.status_code == 403 and refused.json()["topic"] == "billing"

    # The app subscribes through one non-owner and publishes through the other: both forwarded.
    app = JavaReceiver(compile_receiver(tmp_path_factory), secured.url(others[0]), topic, "billing", free_port())
    try:
        entities = [f"m{i}" for i in range(50)]
        send_as_toymb(secured.url(others[1]), topic, entities)
        wait_until(lambda: set(entities) <= set(app.got), timeout=90, what="50 pushes to the Java app")
    finally:
        app.kill()
    assert dead_lettered(secured.url(owner), topic, secured.headers) == 0
