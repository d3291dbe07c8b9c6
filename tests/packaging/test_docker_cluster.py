"""docker-compose.yml on a real Docker engine: 3 nodes, PostgreSQL, Kafka, ActiveMQ and the journal.

Built from the offline Debian base (services/docker.sh), brought up with the compose CLI, driven and
broken through the ``docker`` SDK: a push subscriber in a container on the compose network, the
journal's table and its Kafka route, the owner node killed, PostgreSQL restarted, down and up.
The tests share one cluster and run in this order on one worker.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker.errors
import pytest
import requests

from tests.cluster.harness import Publisher
from tests.packaging.compose_cluster import (
    BASE_IMAGE,
    NODES,
    ComposeCluster,
    build_images,
    engine,
    received_ids,
)
from tests.support import LANE, ROOT, need_service, wait_until

# A cold first test builds every image: minutes on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docker"), pytest.mark.timeout(1800)]

PUB = {"Authorization": "Bearer pub"}
ADMIN = {"Authorization": "Bearer root"}
RUN = uuid.uuid4().hex[:6]
SUBSCRIBER = Path(__file__).with_name("compose_subscriber.py")
LOG = ROOT / ".services" / "docker" / "compose-test.log"


def _cluster_formed(cluster: ComposeCluster) -> bool:
    try:
        views = [requests.get(u + "/v1/cluster", headers=ADMIN, timeout=3).json() for u in cluster.urls()]
    except (requests.RequestException, ValueError):
        return False
    return all(sum(1 for n in view["nodes"] if n["alive"]) == 3 for view in views)


def _wait_formed(cluster: ComposeCluster, what: str) -> None:
    wait_until(lambda: _cluster_formed(cluster), timeout=120, interval=0.5, what=f"three live nodes ({what})")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComposeCluster]:
    try:
        client = engine()
        client.images.get(BASE_IMAGE)
    except docker.errors.DockerException as exc:
        start_log = ROOT / ".services" / "docker" / "start.log"
        why = start_log.read_text().strip().splitlines()[-1:] if start_log.exists() else []
        need_service(False, f"the Docker engine with the base image {BASE_IMAGE} ({exc}; "
                            f"services/docker.sh start said: {' '.join(why) or 'nothing'})")
    cluster = ComposeCluster.for_lane(client, LANE or "test")
    started = time.monotonic()
    build_images(client, cluster.env)
    built = time.monotonic()
    cluster.compose("down", "-v", "--remove-orphans")
    try:
        cluster.compose("up", "-d")
        _wait_formed(cluster, "after up")
        print(f"images built in {built - started:.0f}s, cluster up in {time.monotonic() - built:.0f}s")
        yield cluster
    finally:
        LOG.parent.mkdir(parents=True, exist_ok=True)
        LOG.write_text(cluster.all_logs())
        cluster.compose("down", "-v", "--remove-orphans")


def _publish(url: str, topic: str, msg_id: str) -> dict[str, object]:
    """Publish until acknowledged: 503 (not the owner yet, store away) is the retryable answer."""
    def attempt() -> dict[str, object] | None:
        answer = requests.post(f"{url}/v1/topics/{topic}/messages", headers=PUB,
                               json={"id": msg_id, "key": msg_id, "body": {"n": msg_id}}, timeout=10)
        assert answer.status_code in (200, 201, 503), answer.text
        return answer.json() if answer.status_code in (200, 201) else None

    return wait_until(attempt, timeout=30, interval=0.2, what=f"publish {msg_id} through {url}")  # type: ignore[no-any-return]


def _end_offsets(cluster: ComposeCluster, topic: str) -> dict[str, int]:
    answer = requests.get(f"{cluster.url('toymb-1')}/v1/topics/{topic}", headers=ADMIN, timeout=5)
    assert answer.status_code == 200, answer.text
    return {p: o for p, o in answer.json()["end_offsets"].items() if o}


def _stored_ids(cluster: ComposeCluster, topic: str) -> list[str]:
    return [row[0] for row in cluster.sql(f"SELECT id FROM toymb_messages WHERE topic = '{topic}'")]


@contextmanager
def _publishing(cluster: ComposeCluster, topic: str) -> Iterator[list[Publisher]]:
    """Three clients publishing to ``topic`` until the block ends, each starting at another node."""
    stop = threading.Event()
    urls = cluster.urls()
    publishers = [Publisher(f"{topic}-c{i}", topic, urls[i:] + urls[:i], stop, headers=PUB) for i in range(3)]
    for p in publishers:
        p.start()
    try:
        yield publishers
    finally:
        stop.set()
        for p in publishers:
            p.join(timeout=15)


def _acked(publishers: list[Publisher]) -> int:
    return sum(len(p.acked) for p in publishers)


def test_publishes_through_every_node_reach_a_push_subscriber_on_the_compose_network(
        cluster: ComposeCluster) -> None:
    ids = [f"every-{RUN}-{i}" for i in range(30)]
    with cluster.subscriber(SUBSCRIBER) as subscriber:
        for i, msg_id in enumerate(ids):
            _publish(cluster.urls()[i % 3], "orders", msg_id)
        wait_until(lambda: set(ids) <= set(received_ids(subscriber)), timeout=90, interval=0.5,
                   what="every message pushed to the subscriber container")
    assert sorted(_stored_ids(cluster, "orders")) == sorted(ids)   # once each, whichever node took it


def test_the_journal_keeps_its_table_and_routes_orders_to_kafka(cluster: ComposeCluster) -> None:
    ids = [f"journal-{RUN}-{i}" for i in range(20)]
    for msg_id in ids:
        _publish(cluster.url("toymb-2"), "orders", msg_id)
    end = _end_offsets(cluster, "orders")

    def journaled() -> bool:
        journal = cluster.container("journal")
        assert journal.attrs["RestartCount"] == 0, f"the journal restarted:\n{cluster.logs('journal')}"
        rows = cluster.sql("SELECT partition, next_offset FROM toymb_journal_offsets WHERE topic = 'orders'")
        return {p: int(o) for p, o in rows if int(o)} == end

    # Spark starts in the journal container first: minutes on a loaded 2-core machine.
    wait_until(journaled, timeout=400, interval=2, what="toymb_journal_offsets covering every message of orders")
    keys = cluster.kafka_keys("orders", expected=sum(end.values()))
    assert set(ids) <= keys, f"{len(set(ids) - keys)} journaled messages missing from Kafka topic orders"


def test_killing_the_owner_container_fails_over_and_loses_nothing_acked(cluster: ComposeCluster) -> None:
    topic = f"failover-{RUN}"
    _publish(cluster.url("toymb-1"), topic, f"{topic}-first")
    victim = requests.get(f"{cluster.url('toymb-1')}/v1/topics/{topic}", headers=ADMIN, timeout=5).json()["owner"]
    assert victim in NODES
    with _publishing(cluster, topic) as publishers:
        wait_until(lambda: _acked(publishers) >= 60, timeout=60, what="a steady stream")
        killed_at = time.monotonic()
        cluster.container(victim).kill()
        acked_at_kill = _acked(publishers)
        wait_until(lambda: _acked(publishers) >= acked_at_kill + 60, timeout=90,
                   what="the stream going on after the owner's container was killed")
    acked = {a[0] for p in publishers for a in p.acked} | {f"{topic}-first"}
    after_kill = sum(1 for p in publishers for a in p.acked if a[2] > killed_at)
    for p in publishers:
        assert not [e for e in p.errors if e.startswith("unexpected")], p.errors[:5]
    stored = _stored_ids(cluster, topic)
    print(f"failover: {len(acked)} acked ({after_kill} after the kill of {victim}), {len(stored)} stored")
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged messages are missing"
    assert len(stored) == len(set(stored)), "a message was stored twice"
    new_owner = requests.get(f"{cluster.url(next(n for n in NODES if n != victim))}/v1/topics/{topic}",
                             headers=ADMIN, timeout=5).json()["owner"]
    assert new_owner != victim
    cluster.container(victim).start()   # `docker kill` is a manual stop: no restart policy applies
    _wait_formed(cluster, f"{victim} back")


def test_restarting_postgres_answers_503_not_500_and_recovers(cluster: ComposeCluster) -> None:
    topic = f"pg-restart-{RUN}"
    with _publishing(cluster, topic) as publishers:
        wait_until(lambda: _acked(publishers) >= 30, timeout=60, what="a steady stream")
        postgres = cluster.container("postgres")
        postgres.stop(timeout=10)
        # Down until the nodes have answered it: a restart quicker than the clients' next publishes
        # can go unseen, and then the test would prove nothing about the outage.
        wait_until(lambda: sum(p.statuses[503] for p in publishers) > 0, timeout=60,
                   what="a 503 while PostgreSQL is down")
        postgres.start()
        restarted = _acked(publishers)
        wait_until(lambda: _acked(publishers) >= restarted + 30, timeout=120,
                   what="publishes acknowledged again after PostgreSQL's restart")
    statuses = sum((p.statuses for p in publishers), start=Counter[int]())
    print(f"postgres restart: answers {dict(statuses)}")
    assert set(statuses) <= {200, 201, 503}, f"answers besides 2xx and 503: {dict(statuses)}"
    assert statuses[503] > 0, "no 503 while PostgreSQL restarted: the outage was not observed"
    acked = {a[0] for p in publishers for a in p.acked}
    assert acked <= set(_stored_ids(cluster, topic))


def test_down_and_up_keeps_the_data(cluster: ComposeCluster) -> None:
    before = {t: _end_offsets(cluster, t) for t in ("orders", f"failover-{RUN}")}
    ids = sorted(_stored_ids(cluster, "orders"))
    journaled = "SELECT partition, next_offset FROM toymb_journal_offsets WHERE topic = 'orders'"
    journal = sorted(map(tuple, cluster.sql(journaled)))
    assert ids and journal
    cluster.compose("down")
    cluster.compose("up", "-d")
    _wait_formed(cluster, "after down and up")
    assert {t: _end_offsets(cluster, t) for t in before} == before
    assert sorted(_stored_ids(cluster, "orders")) == ids
    assert sorted(map(tuple, cluster.sql(journaled))) == journal
