"""Seed 000_…'s hard failure "not authorized to write to the kafka topic", against a real Kafka
listener with SASL/PLAIN and the standard authorizer (a private Kafka by ``services/kafka.sh`` with
``TOYMB_KAFKA_SASL_PORT``): the job's principal may describe the destination but lacks WRITE on it,
and the bridge stops hard, naming the topic."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from journal_spark.bridges.kafka import KafkaSink
from journal_spark.routes import HardFailure
from journal_spark.routes_file import load_routes
from tests.bridges_kafka.conftest import BOOTSTRAP, kafka_retry
from tests.support import ROOT, free_port, need_service, port_open, wait_until

KAFKA = str(ROOT / "services" / "kafka.sh")
ADMIN, JOB = ("admin", "admin-pw"), ("job", "job-pw")


class SaslKafka:
    """A private single-node Kafka with PLAINTEXT (its own port) and SASL_PLAINTEXT + ACLs."""

    def __init__(self, state: Path) -> None:
        self.port, self.controller, self.sasl_port = free_port(), free_port(), free_port()
        # (JDK_JAVA_OPTIONS of the test session would pick a second garbage collector for Kafka's JVM)
        self.env = {k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}
        self.env.update({"TOYMB_SERVICES_DIR": str(state), "TOYMB_KAFKA_PORT": str(self.port),
                         "TOYMB_KAFKA_CONTROLLER_PORT": str(self.controller),
                         "TOYMB_KAFKA_SASL_PORT": str(self.sasl_port),
                         "TOYMB_KAFKA_SASL_USERS": ",".join(f"{u}:{p}" for u, p in (ADMIN, JOB)),
                         "TOYMB_KAFKA_HEAP": "-Xmx384M -Xms128M"})
        jars = os.environ.get("TOYMB_KAFKA_CLASSPATH", "").split(":")[0]
        if jars:                                  # reuse the jars fetched for the shared Kafka
            self.env["TOYMB_KAFKA_LIB_DIR"] = str(Path(jars).parent)

    def run(self, command: str) -> None:
        done = subprocess.run([KAFKA, command], env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"services/kafka.sh {command}: {done.stderr[-3000:]}"

    def sasl(self, user: tuple[str, str]) -> dict[str, str]:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user[0], "sasl.password": user[1]}


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKafka]:
    host, _, port = BOOTSTRAP.rpartition(":")
    need_service(port_open(host, int(port)), f"Kafka on {BOOTSTRAP} (its jars serve the private one)")
    kafka = SaslKafka(tmp_path_factory.mktemp("kafka-sasl"))
    kafka.run("start")
    yield kafka
    kafka.run("stop")


def grant(kafka: SaslKafka, acls: list[tuple[Any, str, Any, Any]]) -> None:
    from confluent_kafka.admin import AclBinding, AclPermissionType, AdminClient

    admin = AdminClient(kafka.sasl(ADMIN))
    bindings = [AclBinding(rtype, name, pattern, f"User:{JOB[0]}", "*", op, AclPermissionType.ALLOW)
                for rtype, name, pattern, op in acls]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def can_write(kafka: SaslKafka, producer: Any, topic: str) -> bool:
    """``producer`` (the job's principal) can write ``topic`` now (ACLs reach the broker through its metadata log).

    Seen by the admin in the topic's end offset, not through a delivery callback: confluent-kafka
    turning a refused delivery into a Python error left an exception pending in its C extension
    under load (a SystemError at the next builtin call).
    """
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({**kafka.sasl(ADMIN), "group.id": "acl-probe", "enable.auto.commit": False})
    partition = TopicPartition(topic, 0)

    def end() -> int:
        # A topic just created may not have its leader yet (NOT_LEADER_FOR_PARTITION, seen under load).
        return int(kafka_retry(lambda: reader.get_watermark_offsets(partition, timeout=10), f"{topic}'s end")[1])

    try:
        before = end()
        producer.produce(topic, b"probe")
        producer.flush(10)
        return end() > before
    finally:
        reader.close()


@pytest.mark.timeout(600)
def test_a_principal_without_write_on_the_destination_is_a_hard_stop_naming_it(
    sasl_kafka: SaslKafka, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourcePatternType, ResourceType

    dest, allowed, markers = "orders-locked", "orders-open", "_markers-sasl"
    admin = AdminClient(sasl_kafka.sasl(ADMIN))
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (dest, allowed, markers)]).values():
        future.result(timeout=60)
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    grant(sasl_kafka, [
        (ResourceType.TOPIC, dest, literal, AclOperation.DESCRIBE),            # may see it, not write it
        (ResourceType.TOPIC, allowed, literal, AclOperation.ALL),
        (ResourceType.TOPIC, markers, literal, AclOperation.ALL),
        (ResourceType.TRANSACTIONAL_ID, "toymb-", prefixed, AclOperation.ALL),
        (ResourceType.GROUP, "toymb-", prefixed, AclOperation.ALL),
    ])
    from confluent_kafka import Producer

    probe = Producer({**sasl_kafka.sasl(JOB), "acks": "all", "message.timeout.ms": 5000})
    try:
        wait_until(lambda: can_write(sasl_kafka, probe, allowed), timeout=60, what="the ACLs to reach the authorizer")
    finally:
        probe.close()   # else it reconnects to the stopped server for the rest of the run
    routes = tmp_path / "routes.properties"
    conf = "\n".join(f"kafka.{k}={v}" for k, v in sasl_kafka.sasl(JOB).items())
    routes.write_text(f"bridge.id=sasl-job\n{conf}\nrouting.markers.topic={markers}\n"
                      f"routes.open.predicate=msg.address==open\nroutes.open.dest.topic={allowed}\n"
                      f"routes.locked.predicate=msg.address==locked\nroutes.locked.dest.topic={dest}\n")
    sink = KafkaSink(load_routes(routes))
    try:
        row = {"id": "m1", "topic": "open", "partition": 0, "offset": 0, "key": None, "headers": {},
               "timestamp": int(time.time() * 1000), "content_type": "text/plain", "body": b"fine"}
        assert sink.write_rows([row], 0) == 1                 # the principal works where it may write
        with pytest.raises(HardFailure, match=f"not authorised to write Kafka topic {dest}"):
            sink.write_rows([{**row, "id": "m2", "topic": "locked"}], 1)
    finally:
        sink.close()
    # The PLAINTEXT listener of the same server is as without the authorizer: anyone may write.
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": f"127.0.0.1:{sasl_kafka.port}", "acks": "all"})
    failures: list[Any] = []
    try:
        plain.produce(dest, b"plaintext", on_delivery=lambda err, _msg: failures.append(err))
        assert plain.flush(30) == 0 and failures == [None]
    finally:
        plain.close()
