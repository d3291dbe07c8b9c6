"""The ``peers`` setting: optional with a shared database, and a check when it is given."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.cluster.harness import owner_name, publish
from tests.support import NodeProcess, wait_until

pytestmark = pytest.mark.timeout(120)
FAST = {"TOYMB_NODE_LEASE_MS": "2000", "TOYMB_HEARTBEAT_MS": "300"}


def _peer_status(node: NodeProcess) -> list[dict[str, str]]:
    peers: list[dict[str, str]] = requests.get(node.url + "/v1/cluster", timeout=5).json()["peers"]
    return peers if peers and all(p["status"] in ("ok", "other_cluster") for p in peers) else []


def test_peers_sharing_the_database_form_one_cluster(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    first = NodeProcess(tmp_path / "a", name="toymb-1", env=FAST, database_url=shared).start()
    # ToyMB wrote peers as host:port; the second node bootstraps from the first one.
    second = NodeProcess(tmp_path / "b", name="toymb-2", database_url=shared,
                         env={**FAST, "TOYMB_PEERS": f"127.0.0.1:{first.port}"})
    try:
        second.start()
        statuses = wait_until(lambda: _peer_status(second), timeout=20, what="peer check")
        assert statuses == [{"url": first.url, "status": "ok"}]
        for node in (first, second):
            view = requests.get(node.url + "/v1/cluster", timeout=5).json()
            assert {n["name"] for n in view["nodes"] if n["alive"]} == {"toymb-1", "toymb-2"}
        # Forwarding works over SQLite too: a topic named after a node goes to that node.
        answer = publish(second.url, "toymb-1", "x1")
        assert answer.status_code == 201 and answer.headers["X-ToyMB-Forwarded-To"] == owner_name(
            "toymb-1", ["toymb-1", "toymb-2"]) == "toymb-1"
    finally:
        second.stop()
        first.stop()


def test_a_peer_on_another_database_is_reported(tmp_path: Path) -> None:
    other = NodeProcess(tmp_path / "other", name="toymb-9", env=FAST).start()
    node = NodeProcess(tmp_path / "node", name="toymb-1", env={**FAST, "TOYMB_PEERS": other.url})
    try:
        node.start()
        statuses = wait_until(lambda: _peer_status(node), timeout=20, what="peer check")
        assert statuses == [{"url": other.url, "status": "other_cluster"}]
        assert "must share one database" in node.log_tail(200)
        # It still serves on its own: the peer is not a member it could forward to.
        assert publish(node.url, "orders", "m1").status_code == 201
    finally:
        node.stop()
        other.stop()


def test_forwarding_keeps_the_clients_credentials(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {**FAST, "TOYMB_TOKENS": "pub=publish@orders*,root=admin", "TOYMB_CLUSTER_TOKEN": "between-nodes"}
    nodes = [NodeProcess(tmp_path / n, name=n, env=env, database_url=shared) for n in ("toymb-1", "toymb-2")]
    try:
        for node in nodes:
            node.start()
        by_name = {n.name: n for n in nodes}
        root = {"Authorization": "Bearer root"}

        def both_live() -> bool:
            views = [requests.get(n.url + "/v1/cluster", headers=root, timeout=2).json() for n in nodes]
            return all(len(v["live"]) == 2 for v in views)

        wait_until(both_live, timeout=20, what="two live nodes")
        topic = "orders"
        owner = owner_name(topic, by_name)
        entry = next(n for n in nodes if n.name != owner)
        ok = publish(entry.url, topic, "m1", headers={"Authorization": "Bearer pub"})
        assert ok.status_code == 201 and ok.headers["X-ToyMB-Forwarded-To"] == owner
        # The client's own token is what is checked: forwarding never widens what a client may do.
        pub = {"Authorization": "Bearer pub"}
        assert publish(entry.url, "payments", "m2", headers=pub).status_code == 403
        assert publish(entry.url, topic, "m3").status_code == 401
        # A forged hop without the cluster token is not trusted as a peer.
        forged = publish(by_name[owner].url, topic, "m4",
                         headers={"X-ToyMB-Cluster-Token": "guess", "X-ToyMB-Forwarded": entry.name})
        assert forged.status_code == 401
    finally:
        for node in nodes:
            node.stop()
