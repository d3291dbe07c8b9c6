"""The JMS bridge's failure paths: egress retrying (forever) while ActiveMQ is down, egress pause and
resume over the management API, a bad selector, the broker down during JMS ingress, and a SIGKILL
of the JMS ingress process in the middle of a batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from journal_spark.bridges.jms import build_sinks
from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.jms.egress import JmsSink
from journal_spark.jms.ingress import FAILED, STARTED
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import drain, send_all, stored, stored_count, unique, wait_stored, write_routes
from tests.bridges_jms.test_ingress import Proxy, make_ingress
from tests.support import ROOT, NodeProcess, free_port, wait_until


def rows(count: int, topic: str = "orders") -> list[dict[str, object]]:
    return [{"id": f"m{i}", "topic": topic, "partition": 0, "offset": i, "key": None, "timestamp": 0,
             "content_type": "text/plain", "body": f"m{i}".encode(), "headers": {}} for i in range(count)]


@pytest.mark.timeout(120)
def test_egress_retries_forever_while_activemq_is_down(activemq: str, tmp_path: Path) -> None:
    port, queue = free_port(), unique("down")
    routes = write_routes(tmp_path / "down.properties", [
        f"bridge.id={unique('down')}", f"jms.stomp.port={port}", "jms.egress.retries=-1",
        "jms.egress.retry.ms=200", "routes.r.predicate=msg.address==orders", f"routes.r.dest.jms.queue={queue}"])
    telemetry = BridgeTelemetry("down")
    sink = JmsSink(load_routes(routes), telemetry)
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(sink.write_rows(rows(3), 0)), daemon=True)
    writer.start()
    # ActiveMQ is unreachable: the sink keeps trying (far beyond a bounded count would have given up).
    wait_until(lambda: telemetry.counts(sink.name)[1] >= 5, timeout=30, what="5 failed connection attempts")
    assert writer.is_alive() and result == []
    proxy = Proxy(port)         # ActiveMQ "comes back" on that port
    proxy.start()
    try:
        writer.join(60)
        assert result == [3]
    finally:
        sink.close()
        proxy.close()
    assert sorted(f.body for f in drain(f"/queue/{queue}", 3)) == [b"m0", b"m1", b"m2"]
    assert "gave up" not in (sink.last_error or "")


def test_a_bounded_egress_retry_gives_up_with_a_hard_failure(tmp_path: Path) -> None:
    from journal_spark.routes import HardFailure

    routes = write_routes(tmp_path / "bounded.properties", [
        f"jms.stomp.port={free_port()}", "jms.egress.retries=2", "jms.egress.retry.ms=100",
        "routes.r.predicate=msg.address==orders", "routes.r.dest.jms.queue=q"])
    sink = JmsSink(load_routes(routes))
    with pytest.raises(HardFailure, match="gave up after 2 retries"):
        sink.write_rows(rows(1), 0)


@pytest.mark.timeout(120)
def test_egress_pause_and_resume_through_the_management_api(activemq: str, tmp_path: Path) -> None:
    port, queue = free_port(), unique("paused")
    routes = write_routes(tmp_path / "pause.properties", [
        f"bridge.id={unique('pause')}", f"jms.egress.management.port={port}",
        "routes.r.predicate=msg.address==orders", f"routes.r.dest.jms.queue={queue}"])
    (sink,) = build_sinks(None, None, load_routes(routes), BridgeTelemetry("pause"))
    url = f"http://127.0.0.1:{port}/bridges/jms"
    assert requests.post(f"{url}/pause", timeout=5).json()["state"] == "PAUSED"
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(sink.write_rows(rows(2), 0)), daemon=True)
    writer.start()
    try:
        time.sleep(1.5)
        assert writer.is_alive() and drain(f"/queue/{queue}", 0, idle=0.5) == []      # held
        assert requests.post(f"{url}/resume", timeout=5).json()["state"] == "STARTED"
        writer.join(30)
        assert result == [2]
        status = requests.get(url, timeout=5).json()
        assert status["kind"] == "jms-egress" and status["message_count"] == 2
        assert status["parameters"]["routes"] == ["r"]
        assert requests.post(f"{url}/explode", timeout=5).status_code == 400
    finally:
        sink.close()
    assert sorted(f.body for f in drain(f"/queue/{queue}", 2)) == [b"m0", b"m1"]


def test_a_bad_selector_fails_the_ingress_with_a_clear_error(activemq: str, node: NodeProcess,
                                                             tmp_path: Path) -> None:
    bridge = make_ingress(tmp_path, node.url, f"jms.queue={unique('sel')}", "sel", selector="color = = 'red'",
                          failure_retry_interval="200", max_retries="-1")
    bridge.start()
    try:
        wait_until(lambda: bridge.state == FAILED, timeout=30, what="FAILED")
    finally:
        bridge.stop()
    assert "ActiveMQ refused the selector \"color = = 'red'\"" in (bridge.last_error or "")
    assert len(bridge.attempts) == 1          # a configuration error is not retried


@pytest.mark.timeout(180)
def test_the_broker_down_during_jms_ingress_loses_and_duplicates_nothing(activemq: str, tmp_path: Path) -> None:
    port, queue = free_port(), unique("nobroker")
    late = NodeProcess(tmp_path / "late", port=port)
    bridge = make_ingress(tmp_path, late.url, f"jms.queue={queue}", "late-in", qos="ONCE_AND_ONLY_ONCE",
                          max_batch_size="20", max_batch_time="100", failure_retry_interval="300")
    send_all(f"/queue/{queue}", [(f"m{i}".encode(), {"persistent": "true", "seq": str(i)}) for i in range(100)])
    bridge.start()
    try:
        wait_until(lambda: len(bridge.attempts) >= 3, timeout=30, what="retries while the broker is down")
        assert bridge.state == STARTED and bridge.message_count == 0
        late.start()
        found = wait_stored(late, "late-in", 100, timeout=60)
        time.sleep(1.0)
        found = stored(late, "late-in")
    finally:
        bridge.stop()
        late.stop()
    seqs = Counter(m["headers"]["jms.seq"] for m in found)
    assert len(seqs) == 100 and set(seqs.values()) == {1}
    assert drain(f"/queue/{queue}", 0, idle=0.5) == []           # every message acknowledged


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jms_ingress_sigkilled_mid_batch_stores_each_message_once(activemq: str, node: NodeProcess,
                                                                  tmp_path: Path) -> None:
    total, queue = 3000, unique("sigkill")
    routes = write_routes(tmp_path / "kill.properties", [
        "bridge.id=killed", f"ingress.k.jms.queue={queue}", "ingress.k.dest.topic=killed",
        f"ingress.k.broker.url={node.url}", "ingress.k.qos=ONCE_AND_ONLY_ONCE", "ingress.k.max-batch-size=50",
        "ingress.k.max-batch-time=50"])
    send_all(f"/queue/{queue}", [(f"m{i}".encode(), {"persistent": "true", "seq": str(i)}) for i in range(total)])
    log = tmp_path / "ingress.log"

    def start() -> subprocess.Popen[bytes]:
        code = "from journal_spark.jms.cli import jms_ingress; jms_ingress()"
        with open(log, "ab") as out:
            return subprocess.Popen([sys.executable, "-c", code, "--routes", str(routes)], cwd=str(ROOT),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    proc = start()
    try:
        wait_until(lambda: stored_count(node, "killed") >= 600, timeout=120, what="600 messages in")
        os.killpg(proc.pid, signal.SIGKILL)        # somewhere in a batch: published, acked, or neither
        proc.wait(10)
        at_kill = stored_count(node, "killed")
        assert at_kill < total, "everything came in before the kill; the test proved nothing"
        proc = start()
        wait_stored(node, "killed", total, timeout=180)
        time.sleep(1.5)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)
    seqs = Counter(m["headers"]["jms.seq"] for m in stored(node, "killed"))
    assert len(seqs) == total and set(seqs.values()) == {1}, (total - len(seqs), max(seqs.values()))
