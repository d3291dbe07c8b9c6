"""``jms-ingress`` as a real process, managed over HTTP and with the ``bridge`` commands."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests
from click.testing import CliRunner

from journal_spark.jms.cli import bridge
from tests.bridges_jms.conftest import send_all, stored, unique, wait_stored, write_routes
from tests.support import ROOT, NodeProcess, free_port, wait_until


def test_ingress_process_pause_resume_stop_start(activemq: str, node: NodeProcess, tmp_path: Path) -> None:
    queue, port = unique("manage"), free_port()
    routes = write_routes(tmp_path / "routes.properties", [
        "bridge.id=managed", f"ingress.orders-in.jms.queue={queue}", "ingress.orders-in.dest.topic=managed",
        f"ingress.orders-in.broker.url={node.url}", "ingress.orders-in.max-batch-time=100"])
    log = open(tmp_path / "ingress.log", "wb")
    code = "from journal_spark.jms.cli import jms_ingress; jms_ingress()"
    proc = subprocess.Popen([sys.executable, "-c", code,
                             "--routes", str(routes), "--port", str(port)], cwd=str(ROOT), stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    runner = CliRunner()
    try:
        def up() -> bool:
            try:
                return requests.get(f"{url}/bridges/orders-in", timeout=1).json()["state"] == "STARTED"
            except requests.RequestException:
                return False
        wait_until(up, timeout=30, what="the ingress process")
        send_all(f"/queue/{queue}", [(b"one", {"persistent": "true"})])
        assert len(wait_stored(node, "managed", 1)) == 1

        result = runner.invoke(bridge, ["pause", "orders-in", "--url", url])
        assert result.exit_code == 0 and "PAUSED" in result.output
        send_all(f"/queue/{queue}", [(b"two", {"persistent": "true"})])
        time.sleep(1.0)
        assert len(stored(node, "managed")) == 1          # paused: held in ActiveMQ
        assert runner.invoke(bridge, ["resume", "orders-in", "--url", url]).exit_code == 0
        assert len(wait_stored(node, "managed", 2)) == 2

        assert "STOPPED" in runner.invoke(bridge, ["stop", "orders-in", "--url", url]).output
        send_all(f"/queue/{queue}", [(b"three", {"persistent": "true"})])
        assert "STARTED" in runner.invoke(bridge, ["start", "orders-in", "--url", url]).output
        assert len(wait_stored(node, "managed", 3)) == 3

        status = runner.invoke(bridge, ["status", "orders-in", "--url", url])
        assert '"message_count": 3' in status.output       # counted since the process started
        assert runner.invoke(bridge, ["pause", "nope", "--url", url]).exit_code != 0
        bad = requests.post(f"{url}/bridges/orders-in/explode", timeout=5)
        assert bad.status_code == 400 and bad.json()["error"] == "bad_action"
        metrics = requests.get(f"{url}/metrics", timeout=5).text
        assert 'toymb_jms_ingress_messages_total{bridge="orders-in"} 3.0' in metrics
        assert 'toymb_jms_bridge_failed{bridge="orders-in"} 0.0' in metrics
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
