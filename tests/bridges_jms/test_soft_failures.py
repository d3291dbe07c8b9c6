"""Seed 000_…'s soft failures on JMS ingress (a MapMessage; NON_PERSISTENT under ONCE_AND_ONLY_ONCE)
under each ``routing.on-error`` policy, and the per-route choice to drop non-persistent messages."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.jms.egress import JmsSink
from journal_spark.jms.ingress import FAILED, JmsIngress
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import PrivateActiveMQ, drain, send_all, stored, unique, wait_stored, write_routes
from tests.bridges_jms.test_ingress import make_ingress
from tests.bridges_jms.test_java_client import JARS
from tests.support import NodeProcess, need_service, wait_until

ODD = Path(__file__).with_name("JmsOdd.java")


@pytest.mark.xdist_group("private-activemq")
@pytest.mark.timeout(240)
def test_a_map_message_and_a_non_persistent_one_follow_each_policy(
    private_activemq: PrivateActiveMQ, node: NodeProcess, tmp_path: Path
) -> None:
    need_service(shutil.which("java") is not None and all(Path(j).exists() for j in JARS),
                 "java and Debian's ActiveMQ client jars (apt-get install activemq)")
    amq = private_activemq
    policies = ("fail", "skip", "dead-letter")
    queues = {p: unique(f"odd-{p}") for p in policies}
    sent = subprocess.run(["java", "-cp", ":".join(JARS), str(ODD), f"tcp://127.0.0.1:{amq.openwire_port}",
                           *queues.values()], capture_output=True, text=True, timeout=120)
    assert "SENT" in sent.stdout, sent.stdout + sent.stderr
    bridges: dict[str, JmsIngress] = {}
    for policy in policies:
        # ONCE_AND_ONLY_ONCE refuses the NON_PERSISTENT text; detect.types recognises the MapMessage.
        bridges[policy] = make_ingress(
            tmp_path, node.url, f"jms.queue={queues[policy]}", f"odd-{policy}", port=amq.stomp_port,
            qos="ONCE_AND_ONLY_ONCE", max_batch_time="100",
            extra=("jms.stomp.detect.types=true", f"routing.on-error={policy}",
                   f"routing.dead-letter.topic=odd-dlq-{policy}"))
        bridges[policy].start()
    try:
        fail = bridges["fail"]
        wait_until(lambda: fail.state == FAILED, timeout=60, what="the fail policy to stop the ingress")
        assert "a JMS MapMessage is neither text nor binary" in (fail.last_error or "")
        assert "routing.on-error=fail stops the ingress" in (fail.last_error or "")

        skip = bridges["skip"]
        assert [m["body"] for m in wait_stored(node, "odd-skip", 1)] == [b"text"]
        wait_until(lambda: skip.skipped == {"not-text-or-binary": 1, "non-persistent": 1}, timeout=30,
                   what="both soft failures counted")

        assert [m["body"] for m in wait_stored(node, "odd-dead-letter", 1)] == [b"text"]
        letters = {m["headers"]["toymb.dlq.reason"]: m for m in wait_stored(node, "odd-dlq-dead-letter", 2)}
        assert set(letters) == {"not-text-or-binary", "non-persistent"}
        mapped = letters["not-text-or-binary"]
        assert mapped["headers"]["jms.CorrelationId"] == "map-1"
        assert json.loads(mapped["body"]) == {"map": {"entry": {"string": ["k", "v"]}}}   # ActiveMQ's JSON
        assert letters["non-persistent"]["body"] == b"fleeting"
        assert "only available for persistent" in letters["non-persistent"]["headers"]["toymb.dlq.error"]
        assert letters["non-persistent"]["headers"]["toymb.dlq.route"] == "i"
        assert bridges["dead-letter"].dead_lettered == 2
    finally:
        for bridge in bridges.values():
            bridge.stop()
    assert stored(node, "odd-fail") == []            # a stopped ingress brought nothing in


def test_non_persistent_messages_dropped_by_choice_on_ingress_and_on_a_route(
    activemq: str, node: NodeProcess, tmp_path: Path
) -> None:
    queue = unique("np-in")
    send_all(f"/queue/{queue}", [(b"kept", {"persistent": "true"}), (b"dropped", {})])
    bridge = make_ingress(tmp_path, node.url, f"jms.queue={queue}", "np-in", max_batch_time="100",
                          non_persistent="drop")
    bridge.start()
    try:
        wait_until(lambda: bridge.skipped.get("non-persistent") == 1, timeout=30, what="the drop counted")
        assert [m["body"] for m in wait_stored(node, "np-in", 1)] == [b"kept"]
    finally:
        bridge.stop()
    assert drain(f"/queue/{queue}", 0, idle=0.5) == []          # dropped means acknowledged

    out = unique("np-out")
    routes = write_routes(tmp_path / "np.properties", [
        f"bridge.id={unique('np')}", "routes.r.predicate=msg.address==orders",
        f"routes.r.dest.jms.queue={out}", "routes.r.non-persistent=drop"])
    telemetry = BridgeTelemetry("np")
    sink = JmsSink(load_routes(routes), telemetry)
    rows = [{"id": f"m{i}", "topic": "orders", "partition": 0, "offset": i, "key": None, "timestamp": 0,
             "content_type": "text/plain", "body": f"m{i}".encode(), "headers": headers}
            for i, headers in enumerate([{"jms.DeliveryMode": "NON_PERSISTENT"},
                                         {"jms.JMSDeliveryMode": "NON_PERSISTENT"},
                                         {"jms.DeliveryMode": "PERSISTENT"}, {}])]
    try:
        assert sink.write_rows(rows, 0) == 2
    finally:
        sink.close()
    assert sorted(f.body for f in drain(f"/queue/{out}", 2)) == [b"m2", b"m3"]
    assert telemetry.skipped_count(sink.name, "non-persistent") == 2


def test_a_bad_non_persistent_choice_is_refused(tmp_path: Path) -> None:
    from journal_spark.routes import RoutesError

    path = write_routes(tmp_path / "bad.properties", ["routes.r.predicate=msg.address==a",
                                                      "routes.r.dest.jms.queue=q", "routes.r.non-persistent=maybe"])
    with pytest.raises(RoutesError, match="non-persistent must be one of bridge, drop"):
        load_routes(path)
