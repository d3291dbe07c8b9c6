"""docker-compose.yml's settings, its nodes run as local processes (test_docker_cluster.py: on an engine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import requests

from tests.packaging.compose_cluster import TOKENS, compose_command, compose_file, resolve
from tests.support import ROOT, NodeProcess, free_port, need_service, wait_until


def test_compose_declares_the_cluster() -> None:
    services = compose_file()["services"]
    assert {"postgres", "toymb-1", "toymb-2", "toymb-3", "kafka", "activemq", "journal"} <= set(services)
    assert services["journal"]["command"][:2] == ["journal", "run"]
    routes = services["journal"]["command"][services["journal"]["command"].index("--routes") + 1]
    from journal_spark.routes_file import load_routes

    parsed = load_routes(ROOT / "deploy" / Path(routes).name)  # a bad file is a startup error
    assert [r.destination.kind for r in parsed.routes] == ["kafka", "jms-queue"]
    for name in ("toymb-1", "toymb-2", "toymb-3"):
        env = services[name]["environment"]
        assert env["TOYMB_NODE_NAME"] == name and env["TOYMB_DATABASE_URL"].startswith("postgresql://")


def test_compose_nodes_form_a_cluster_as_local_processes(tmp_path: Path, pg_url: str) -> None:
    services = compose_file()["services"]
    nodes: list[NodeProcess] = []
    try:
        for name in ("toymb-1", "toymb-2", "toymb-3"):
            env = {k: resolve(v, {"TOYMB_TOKENS": TOKENS, "TOYMB_CLUSTER_TOKEN": "cluster-secret",
                                   "TOYMB_PG_PASSWORD": "unused"})
                   for k, v in services[name]["environment"].items()}
            assert services[name]["command"] == ["serve"]
            port = free_port()
            # Only the addresses change: loopback instead of the compose network.
            env.update(TOYMB_HOST="127.0.0.1", TOYMB_PORT=str(port), TOYMB_NODE_URL=f"http://127.0.0.1:{port}",
                       TOYMB_DATABASE_URL=pg_url, TOYMB_PUSH_ALLOW="127.0.0.0/8")
            nodes.append(NodeProcess(tmp_path / name, port=port, name=name, env=env).start(wait=False))
        for node in nodes:
            node.wait_ready(timeout=90)
        auth = {"Authorization": "Bearer root"}

        def all_alive() -> bool:
            views = [requests.get(n.url + "/v1/cluster", headers=auth, timeout=5).json() for n in nodes]
            return all(sum(1 for n in view["nodes"] if n["alive"]) == 3 for view in views)

        wait_until(all_alive, timeout=30, what="every node seeing three live nodes")
        for i, node in enumerate(nodes):
            def published(node: NodeProcess = node, i: int = i) -> bool:
                r = requests.post(f"{node.url}/v1/topics/orders/messages", headers={"Authorization": "Bearer pub"},
                                  json={"id": f"m{i}", "body": {"n": i}}, timeout=10)
                # 503 not_owner is the documented retryable answer while live sets converge.
                assert r.status_code in (200, 201, 503), r.text
                return r.status_code in (200, 201)

            wait_until(published, timeout=20, interval=0.2, what=f"a publish through {node.name}")
        topic = requests.get(f"{nodes[2].url}/v1/topics/orders", headers=auth, timeout=5).json()
        assert sum(topic["end_offsets"].values()) == 3
        denied = requests.post(f"{nodes[1].url}/v1/topics/orders/messages", json={"body": 1}, timeout=5)
        assert denied.status_code == 401
    finally:
        for node in nodes:
            node.stop()


@pytest.mark.parametrize("secret", ["TOYMB_TOKENS", "TOYMB_CLUSTER_TOKEN", "TOYMB_PG_PASSWORD"])
def test_compose_refuses_to_start_without_a_secret_and_names_it(secret: str) -> None:
    try:
        command = compose_command()
    except AssertionError as exc:
        need_service(False, f"docker compose ({exc})")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env |= {k: "x" for k in ("TOYMB_TOKENS", "TOYMB_CLUSTER_TOKEN", "TOYMB_PG_PASSWORD") if k != secret}
    done = subprocess.run([*command, "-f", str(ROOT / "docker-compose.yml"), "config"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"set {secret}" in done.stderr, done.stderr
