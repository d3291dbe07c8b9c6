"""A real JMS client (Java, ActiveMQ's OpenWire client from Debian's jars) on both ends of the bridge."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from journal_spark.jms.egress import JmsSink
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import stored, unique, wait_stored, write_routes
from tests.bridges_jms.test_ingress import make_ingress
from tests.support import NodeProcess, need_service

JARS = [
    f"/usr/share/java/{name}.jar"
    for name in (
        "activemq-client",
        "geronimo-jms_1.1_spec",
        "hawtbuf",
        "slf4j-api",
        "geronimo-j2ee-management-1.1-spec",
    )
]
PROBE = Path(__file__).with_name("JmsProbe.java")


@pytest.mark.timeout(120)
def test_java_jms_client_receives_and_sends(activemq: str, node: NodeProcess, tmp_path: Path) -> None:
    need_service(shutil.which("java") is not None and all(Path(j).exists() for j in JARS),
                 "java and Debian's ActiveMQ client jars (apt-get install activemq)")
    out_queue, in_queue = unique("java-out"), unique("java-in")
    routes = write_routes(
        tmp_path / "routes.properties",
        [
            f"bridge.id={unique('java-bridge')}",
            "routes.r.predicate=msg.address==orders",
            f"routes.r.dest.jms.queue={out_queue}",
        ],
    )
    binary = bytes([0, 1, 2, 250, 255])
    rows = [
        {"id": "t1", "topic": "orders", "partition": 0, "offset": 0, "key": "k", "timestamp": 0,
         "content_type": "text/plain", "body": "héllo".encode(),
         "headers": {"jms.JMSCorrelationID": "corr-42", "jms.JMSType": "order", "jms.JMSPriority": "8",
                     "jms.color": "red", "trace.id": "t-7"}},
        {"id": "b1", "topic": "orders", "partition": 0, "offset": 1, "key": None, "timestamp": 0,
         "content_type": "application/octet-stream", "body": binary,
         "headers": {"jms.JMSCorrelationID": "corr-43", "jms.JMSDeliveryMode": "NON_PERSISTENT"}},
        # The seed's names (what the ingress writes) set the same JMS header fields.
        {"id": "s1", "topic": "orders", "partition": 0, "offset": 2, "key": None, "timestamp": 0,
         "content_type": "text/plain", "body": b"seed",
         "headers": {"jms.CorrelationId": "corr-44", "jms.Type": "invoice", "jms.Priority": "2",
                     "jms.DeliveryMode": "NON_PERSISTENT", "jms.MessageId": "ID:elsewhere-1"}},
    ]
    sink = JmsSink(load_routes(routes))
    try:
        assert sink.write_rows(rows, 0) == 3
    finally:
        sink.close()
    bridge = make_ingress(tmp_path, node.url, f"jms.queue={in_queue}", "from-java", max_batch_time="100",
                          qos="ONCE_AND_ONLY_ONCE")
    bridge.start()
    try:
        result = subprocess.run(
            ["java", "-cp", ":".join(JARS), str(PROBE), "tcp://127.0.0.1:61616", out_queue, "3", in_queue],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        lines = [line for line in result.stdout.splitlines() if line.startswith(("TEXT", "BYTES", "SENT"))]
        assert lines[0] == f"TEXT corr-42 order 8 true red t-7 1 {'héllo'.encode().hex()}"
        assert lines[1] == f"BYTES corr-43 null 4 false null null 1 {binary.hex()}"
        assert lines[2] == f"TEXT corr-44 invoice 2 false null null 1 {b'seed'.hex()}"
        sent_id = lines[3].split()[1]
        (message,) = wait_stored(node, "from-java", 1)
    finally:
        bridge.stop()
    h = message["headers"]
    assert message["body"] == b"from java" and message["content_type"] == "text/plain"
    assert message["id"] == sent_id == h["jms.MessageId"]
    assert not any(name.startswith("jms.JMS") for name in h), h      # the seed's names only
    assert h["jms.CorrelationId"] == "java-corr-1" and h["jms.Type"] == "reply"
    assert h["jms.Priority"] == "7" and h["jms.DeliveryMode"] == "PERSISTENT"
    assert h["jms.region"] == "eu-west" and h["jms.attempt"] == "3" and h["jms.urgent"] == "true"
    assert len(stored(node, "from-java")) == 1
