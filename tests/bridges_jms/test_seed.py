"""Seed ``000_…``'s own routes example, its header names, and one bridge id for both directions."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from journal_spark.bridges.kafka import KafkaSink
from journal_spark.bridges.kafka_ingress import KafkaIngress
from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import send_all, stored, unique, wait_stored
from tests.bridges_jms.test_ingress import make_ingress
from tests.bridges_kafka.conftest import BOOTSTRAP, consume_all, create_topics
from tests.support import NodeProcess, need_service, port_open

# Seed 000_…, "Configuring Routes", verbatim.
SEED_ROUTES = """routing.dead-letter.topic=jms-bridge-to-kafka-dead-letter-topic

routes.foo-route.name=foo-route
routes.foo-route.predicate=msg.address==foo-topic
routes.foo-route.dest.topic=foobar-topic
routes.foo-route.conv.key=msg.header.CorrelationId

routes.bar-route.name=bar-route
routes.bar-route.predicate=msg.address==bar-topic
routes.bar-route.dest.topic=foobar-topic
routes.bar-route.conv.key=msg.header.CorrelationId
"""


@pytest.fixture
def kafka_up() -> None:
    host, _, port = BOOTSTRAP.rpartition(":")
    need_service(port_open(host, int(port)), f"Kafka on {BOOTSTRAP}")


def ensure_topic(name: str) -> None:
    from confluent_kafka.admin import AdminClient

    if name not in AdminClient({"bootstrap.servers": BOOTSTRAP}).list_topics(timeout=10).topics:
        try:
            create_topics(name)
        except Exception:  # noqa: BLE001 - another worker created it meanwhile
            pass


def journal_rows(node: NodeProcess, topic: str) -> list[dict[str, Any]]:
    """The node's stored messages of ``topic`` as the journal's rows."""
    return [{**m, "topic": topic, "timestamp": int(time.time() * 1000)} for m in stored(node, topic)]


def test_the_seed_routes_example_verbatim_with_one_bridge_id(
    activemq: str, kafka_up: None, node: NodeProcess, tmp_path: Path
) -> None:
    """A JMS message with a CorrelationID reaches Kafka keyed by it, with jms.MessageId and the origin,
    although the JMS ingress and the Kafka egress are one bridge (one bridge.id)."""
    ensure_topic("foobar-topic")
    bridge = unique("seed-bridge")
    queue = unique("seed-in")
    routes = tmp_path / "jms-bridge.properties"
    routes.write_text(f"bridge.id={bridge}\nkafka.bootstrap.servers={BOOTSTRAP}\n"
                      f"ingress.in.jms.queue={queue}\ningress.in.dest.topic=foo-topic\n"
                      f"ingress.in.broker.url={node.url}\ningress.in.max-batch-time=100\n" + SEED_ROUTES)
    correlation = f"corr{uuid.uuid4().hex[:12]}"
    send_all(f"/queue/{queue}", [(b"seed body", {"persistent": "true", "correlation-id": correlation,
                                                 "type": "order", "color": "red"})])
    ingress = make_ingress(tmp_path, node.url, f"jms.queue={queue}", "foo-topic", bridge=bridge,
                           max_batch_time="100")
    ingress.start()
    try:
        (message,) = wait_stored(node, "foo-topic", 1)
    finally:
        ingress.stop()
    h = message["headers"]
    assert h["jms.CorrelationId"] == correlation and h["jms.Type"] == "order" and h["jms.color"] == "red"
    assert h["jms.MessageId"].startswith("ID:") and h["jmsbridge.origin"] == bridge

    telemetry = BridgeTelemetry(bridge)
    sink = KafkaSink(load_routes(routes), telemetry)      # the default on-error=fail: nothing may fail
    try:
        assert sink.write_rows(journal_rows(node, "foo-topic"), 0) == 1
    finally:
        sink.close()
    records = [r for r in consume_all("foobar-topic", idle_s=2)
               if r.key() == correlation.encode()]
    assert len(records) == 1
    headers = {k: v.decode() for k, v in records[0].headers() or []}
    assert headers["jms.MessageId"] == h["jms.MessageId"] and headers["jmsbridge.origin"] == bridge
    assert records[0].value() == b"seed body"
    assert telemetry.skipped_count(sink.name) == 0


def test_a_kafka_message_that_came_in_is_not_sent_back_to_kafka(
    kafka_up: None, node: NodeProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Producer

    source, back = f"src-{uuid.uuid4().hex[:8]}", f"back-{uuid.uuid4().hex[:8]}"
    create_topics(source, back)
    bridge = unique("both-ways")
    routes = tmp_path / "routes.properties"
    routes.write_text(f"bridge.id={bridge}\nkafka.bootstrap.servers={BOOTSTRAP}\n"
                      f"ingress.k.kafka.topic={source}\ningress.k.dest.topic=came-in\n"
                      f"ingress.k.broker.url={node.url}\n"
                      f"routes.out.predicate=msg.address==came-in\nroutes.out.dest.topic={back}\n")
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(source, b"from kafka", key=b"k1")
    producer.flush(10)
    loaded = load_routes(routes)
    ingress = KafkaIngress(loaded, loaded.ingress[0])
    import threading

    ingress.run(threading.Event(), idle_exit_s=2.0)
    (message,) = wait_stored(node, "came-in", 1)
    assert message["headers"]["jmsbridge.path"] == f"{bridge}@kafka"
    telemetry = BridgeTelemetry(bridge)
    sink = KafkaSink(loaded, telemetry)
    try:
        assert sink.write_rows(journal_rows(node, "came-in"), 0) == 0
    finally:
        sink.close()
    assert consume_all(back, idle_s=2) == []
    assert telemetry.skipped_count(sink.name, "cycle") == 1
    assert "not bridged to kafka (cycle)" in caplog.text and "route out" in caplog.text


def test_a_message_from_a_real_artemis_bridge_continues_its_id_list(activemq: str, node: NodeProcess,
                                                                    tmp_path: Path) -> None:
    queue = unique("artemis")
    # Artemis writes AMQ_BRIDGE_MSG_ID_LIST; the seed (its manual) names it ACTIVEMQ_BRIDGE_MSG_ID_LIST.
    send_all(f"/queue/{queue}", [(b"hop", {"persistent": "true", "AMQ_BRIDGE_MSG_ID_LIST": "ID:artemis-1"})])
    bridge = make_ingress(tmp_path, node.url, f"jms.queue={queue}", "artemis-in", add_message_id_in_header="true",
                          max_batch_time="100")
    bridge.start()
    try:
        (message,) = wait_stored(node, "artemis-in", 1)
    finally:
        bridge.stop()
    h = message["headers"]
    assert h["ACTIVEMQ_BRIDGE_MSG_ID_LIST"] == f"ID:artemis-1,{h['jms.MessageId']}"
    assert "AMQ_BRIDGE_MSG_ID_LIST" not in h and "jms.AMQ_BRIDGE_MSG_ID_LIST" not in h
