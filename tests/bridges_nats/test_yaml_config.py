"""nats-jms-bridge's YAML configuration: read as the reference's users wrote it, or refused naming the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nats_bridge.codec import BridgeMessage, decode, encode
from nats_bridge.errors import NatsConfigError
from nats_bridge.yaml_config import load_yaml_settings

from .conftest import BridgeProcess, NatsThread, start_java_service, unique

# The reference's examples/.../jms/nats2jms/nats-bridge.yaml, as published.
REFERENCE_SAMPLE = """---
name: "Example NATS to JMS Request/Reply"
dateTime:
- 2020
- 4
- 30
- 0
- 53
- 50
- 423615000
bridges:
- name: "nats2JMS"
  bridgeType: "REQUEST_REPLY"
  source:
    name: "nats"
    busType: "NATS"
    subject: "{subject}"
    clusterName: "natsCluster"
  destination:
    name: "activeMQ"
    busType: "JMS"
    subject: "dynamicQueues/{queue}"
    clusterName: "jmsCluster"
  copyHeaders: {copy}
  workers: 5
  tasks : 2

clusters:
  jmsCluster:
    name: "jmsCluster"
    properties: !<jms>
      config:
        java.naming.factory.initial: "org.apache.activemq.artemis.jndi.ActiveMQInitialContextFactory"
        connectionFactory.ConnectionFactory: "tcp://{host}:61616"
        queue.queue/testQueue: "queue.queue/testQueue=testQueue"
      jmsDestinationType: "QUEUE"
  natsCluster:
    name: "natsCluster"
    properties: !<nats>
      host: "{host}"
      port: 4222
      servers: []
      config:
        io.nats.client.reconnect.wait: 3000
        io.nats.client.reconnect.max: 10
        io.nats.client.timeout: 4000
"""


def sample(tmp_path: Path, subject: str = "request_reply_jms", queue: str = "requests", copy: str = "false",
           host: str = "localhost", edit: Callable[[str], str] = lambda s: s) -> Path:
    path = tmp_path / "nats-bridge.yaml"
    path.write_text(edit(REFERENCE_SAMPLE.format(subject=subject, queue=queue, copy=copy, host=host)), "utf-8")
    return path


def test_the_reference_sample_is_read_as_its_users_meant_it(tmp_path: Path) -> None:
    settings = load_yaml_settings(sample(tmp_path))
    c = settings.connections
    assert c.nats_servers == ("nats://localhost:4222",)
    assert (c.nats_reconnect_wait_s, c.nats_reconnect_max, c.nats_connect_timeout_s) == (3.0, 10, 4.0)
    assert (c.stomp_host, c.stomp_port) == ("localhost", 61613)
    (bridge,) = settings.bridges
    assert (bridge.name, bridge.type, bridge.direction, bridge.source, bridge.dest) == (
        "nats2JMS", "request-reply", "nats-to-jms", "request_reply_jms", "requests")
    assert (bridge.headers, bridge.max_in_flight) == ("none", 10)      # copyHeaders false; workers x tasks


@pytest.mark.parametrize(("edit", "key"), [
    (lambda s: s.replace('"REQUEST_REPLY"', '"DYNAMIC_FORWARD"'), "bridges[0].bridgeType"),
    (lambda s: s.replace("org.apache.activemq.artemis.jndi.ActiveMQInitialContextFactory",
                         "io.nats.bridge.integration.ibmmq.IbmMqInitialContextFactory"), "java.naming.factory.initial"),
    (lambda s: s.replace("io.nats.client.timeout: 4000", "io.nats.client.tls.jssl.enable: true"),
     "io.nats.client.tls.jssl.enable"),
    (lambda s: s.replace("  workers: 5", '  transforms: ["addHeader"]\n  workers: 5'), "bridges[0].transforms"),
    (lambda s: s.replace("dynamicQueues/", "dynamicTopics/"), "bridges[0].destination.subject"),
    (lambda s: s.replace("  tasks : 2", "  tasks : 2\n  retries: 3"), "bridges[0].retries"),
    (lambda s: s.replace('busType: "JMS"', 'busType: "NATS"').replace('clusterName: "jmsCluster"',
                                                                       'clusterName: "natsCluster"'),
     "bridges[0] (nats2JMS): nats-bridge.nats2JMS.dest.nats.subject"),
    (lambda s: s.replace('jmsDestinationType: "QUEUE"', 'jmsDestinationType: "TOPIC"'), "jmsDestinationType"),
    (lambda s: s.replace("properties: !<jms>", "properties:"), "clusters.jmsCluster.properties"),
    (lambda s: s.replace("tcp://localhost:61616", "tcp://localhost:5672"), "toymb.stomp.port"),
    (lambda s: "secretKey: abc\n" + s.removeprefix("---\n"), "secretKey"),
])
def test_what_the_bridge_does_not_do_is_refused_naming_the_key(tmp_path: Path, edit: Callable[[str], str],
                                                                 key: str) -> None:
    with pytest.raises(NatsConfigError) as caught:
        load_yaml_settings(sample(tmp_path, edit=edit))
    assert key in str(caught.value)


@pytest.mark.timeout(120)
def test_the_bridge_runs_from_the_reference_yaml(stomp_url: str, nats_client: NatsThread, java_jms: list[str],
                                                 bridges: Callable[..., BridgeProcess], tmp_path: Path) -> None:
    subject, queue = unique("yaml"), unique("yaml")
    path = sample(tmp_path, subject, queue, copy="true", host="127.0.0.1")
    bridge = BridgeProcess(path, tmp_path).start()
    service = start_java_service(java_jms, queue, 1)
    try:
        reply = nats_client.call(nats_client.nc.request(
            subject, encode(BridgeMessage(body=b"from yaml", headers={"H1": "v"})), timeout=30))
    finally:
        service.kill()
        bridge.stop()
    answer = decode(reply.data)
    assert answer.body == b"echo:from yaml" and answer.headers["echo_H1"] == "v"     # copyHeaders: true
    assert bridge.proc is not None and bridge.proc.returncode == 0
