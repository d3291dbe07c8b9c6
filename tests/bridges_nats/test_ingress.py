"""JetStream ingress: a stream into a broker topic, ids nats:<stream>:<seq>, nothing twice across a SIGKILL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.bridges_jms.conftest import stored, stored_count, wait_stored
from tests.support import NodeProcess, wait_until

from .conftest import BridgeProcess, NatsThread, unique

COUNT = 1500


@pytest.fixture
def broker_node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "node").start()
    yield proc
    proc.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_jetstream_stream_comes_into_a_broker_topic_once_across_a_sigkill(
        nats_client: NatsThread, broker_node: NodeProcess, bridges: Callable[..., BridgeProcess]) -> None:
    subject, topic = unique("js-in"), unique("js-in").replace("toymb.test.", "")
    stream = unique("JSIN").replace(".", "_")
    js = nats_client.nc.jetstream()
    nats_client.call(js.add_stream(name=stream, subjects=[subject]))
    try:
        async def publish() -> None:
            for i in range(COUNT):
                await js.publish(subject, f"e-{i}".encode(), headers={"n": str(i)})

        nats_client.call(publish(), timeout=240)
        lines = [f"bridge.id={unique('nb')}", "nats-bridge.in.type=ingress",
                 f"nats-bridge.in.source.nats.subject={subject}",
                 "nats-bridge.in.source.jetstream.durable=into-broker", f"nats-bridge.in.dest.topic={topic}",
                 f"nats-bridge.in.broker.url={broker_node.url}", "nats-bridge.in.max-in-flight=100"]
        first = bridges(lines)
        wait_until(lambda: first.status("in")["counts"]["publish_count"] >= COUNT // 4, timeout=120,
                   what=f"a quarter stored before the kill\n{first.log_tail()}")
        first.kill()
        bridges(lines)
        wait_stored(broker_node, topic, COUNT, timeout=180)
        wait_until(lambda: stored_count(broker_node, topic) >= COUNT, timeout=30, what="all stored")
        rows = stored(broker_node, topic)
    finally:
        nats_client.call(js.delete_stream(stream))
    assert len(rows) == COUNT                                    # exactly once: the ids dedupe redeliveries
    assert sorted(r["id"] for r in rows) == sorted(f"nats:{stream}:{seq}" for seq in range(1, COUNT + 1))
    by_id = {r["id"]: r for r in rows}
    first_row = by_id[f"nats:{stream}:1"]
    assert first_row["body"] == b"e-0" and first_row["headers"]["n"] == "0"
    assert first_row["headers"]["jmsbridge.hops"] == "1"


@pytest.mark.timeout(120)
def test_the_ingress_token_is_used_and_a_refused_token_loses_nothing(
        nats_client: NatsThread, tmp_path: Path, bridges: Callable[..., BridgeProcess]) -> None:
    node = NodeProcess(tmp_path / "secured", env={"TOYMB_TOKENS": "ingress-secret=publish@*"}).start()
    subject, topic = unique("js-tok"), unique("js-tok").replace("toymb.test.", "")
    stream = unique("JSTOK").replace(".", "_")
    js = nats_client.nc.jetstream()
    nats_client.call(js.add_stream(name=stream, subjects=[subject]))
    try:
        for i in range(5):
            nats_client.call(js.publish(subject, f"t-{i}".encode()))
        base = [f"bridge.id={unique('nb')}", "nats-bridge.in.type=ingress",
                f"nats-bridge.in.source.nats.subject={subject}",
                "nats-bridge.in.source.jetstream.durable=tok", f"nats-bridge.in.dest.topic={topic}",
                f"nats-bridge.in.broker.url={node.url}"]
        wrong = bridges([*base, "nats-bridge.in.token=wrong"])
        wait_until(lambda: "401" in (wrong.status("in")["last_error"] or ""), timeout=60, what="the 401 shown")
        assert wrong.status("in")["counts"]["received_errors"] == 0       # nothing skipped
        wrong.stop()
        bridges([*base, "nats-bridge.in.token=ingress-secret"])
        rows = wait_stored(node, topic, 5, timeout=60)
    finally:
        nats_client.call(js.delete_stream(stream))
        node.stop()
    assert sorted(r["body"] for r in rows) == [f"t-{i}".encode() for i in range(5)]
