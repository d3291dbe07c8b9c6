"""``toymb status [--watch]`` against a real node process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from broker.console.status import status
from tests.support import NodeProcess

TOKEN = "status-reader"


@pytest.fixture
def secured_node(tmp_path: Path) -> Iterator[NodeProcess]:
    node = NodeProcess(tmp_path / "node", env={"TOYMB_TOKENS": f"{TOKEN}=consume,pub=publish"}).start()
    yield node
    node.stop()


def test_status_prints_the_overview_and_watch_adds_rates(secured_node: NodeProcess) -> None:
    url, pub = secured_node.url, {"Authorization": "Bearer pub"}
    requests.post(f"{url}/v1/topics/orders/messages", json={"messages": [{"body": i} for i in range(5)]},
                  headers=pub, timeout=10).raise_for_status()
    requests.post(f"{url}/v1/topics/orders/groups/audit/subscribers", json={"mode": "pull", "start": "earliest"},
                  headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).raise_for_status()
    runner = CliRunner()
    once = runner.invoke(status, ["--url", f"{url},http://other:1", "--token", TOKEN])
    assert once.exit_code == 0, once.output
    lines = once.output.splitlines()
    assert lines[0].startswith("ToyMB: 1 of 1 nodes live, answered by toymb-1")
    assert any(line.split()[:2] == ["toymb-1", "yes"] for line in lines)
    assert any(line.split()[:2] == ["orders/audit", "pull"] and line.split()[2] == "5" for line in lines)
    assert "JOURNAL: 0 journaled, lag 5; job: no metrics address configured" in once.output

    env = {"TOYMB_URLS": url, "TOYMB_TOKEN": TOKEN}
    watched = runner.invoke(status, ["--watch", "--count", "2", "--interval", "0.5"], env=env)
    assert watched.exit_code == 0, watched.output
    frames = watched.output.split("ToyMB: ")[1:]
    assert len(frames) == 2
    orders = [line.split() for line in frames[1].splitlines() if line.startswith("orders ")]
    assert orders and orders[0][5] == "0.0"          # the second look has a rate: nothing published between


def test_status_without_a_token_is_refused_with_the_nodes_reason(secured_node: NodeProcess) -> None:
    result = CliRunner().invoke(status, ["--url", secured_node.url], env={"TOYMB_TOKEN": ""})
    assert result.exit_code == 1 and "answered 401" in result.output and "Bearer" in result.output
    down = CliRunner().invoke(status, ["--url", "http://127.0.0.1:1"])
    assert down.exit_code == 1 and "cannot reach" in down.output
