"""A 3-node cluster on PostgreSQL and on MariaDB, as real processes on loopback: forwarding, failover, fencing."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from broker.cluster.forward import FORWARDED_HEADER, FORWARDED_TO_HEADER
from tests.cluster.harness import (
    LEASE_MS,
    NAMES,
    Cluster,
    Publisher,
    Receiver,
    owner_name,
    private_database,
    publish,
)
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LEASE_S = LEASE_MS / 1000


@pytest.fixture(params=["postgresql", "mariadb"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    server: str = request.getfixturevalue("mariadb_url" if request.param == "mariadb" else "pg_url")
    nodes = Cluster(tmp_path, private_database(server))
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def metric(url: str, name: str) -> float:
    for line in requests.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_publishes_sent_to_every_node_land_once_at_the_owner(cluster: Cluster) -> None:
    # Named after each node (affinity) plus ordinary names: every node owns some of them.
    topics = [*NAMES, "orders", "payments", "audit.log", "clicks-7"]
    owners = {t: owner_name(t) for t in topics}
    assert set(owners.values()) == set(NAMES)
    for t in NAMES:
        assert owners[t] == t
    for topic in topics:
        for sender in NAMES:
            for i in range(3):
                answer = publish(cluster.url(sender), topic, f"{topic}/{sender}/{i}", key=f"k{i}")
                assert answer.status_code == 201, answer.text
                assert answer.json()["topic"] == topic
                # The client gets the owner's answer, relayed once.
                expected = None if sender == owners[topic] else owners[topic]
                assert answer.headers.get(FORWARDED_TO_HEADER) == expected
    for topic in topics:
        assert sorted(r[2] for r in cluster.rows(topic)) == sorted(
            f"{topic}/{s}/{i}" for s in NAMES for i in range(3))
        cluster.assert_dense(topic)
        # The owner claimed the topic: it is the only node that ever sequenced it.
        assert cluster.topic_row(topic) == (owners[topic], 1)
        for sender in NAMES:
            described = requests.get(f"{cluster.url(sender)}/v1/topics/{topic}", timeout=5).json()
            assert described["owner"] == owners[topic]
    # Retried publishes (same ids, any node) store nothing new.
    for topic in topics:
        for sender in NAMES:
            again = publish(cluster.url(sender), topic, f"{topic}/{NAMES[0]}/0", key="k0")
            assert again.status_code == 200 and again.json()["duplicate"] is True
        assert len(cluster.rows(topic)) == 9
    for name in NAMES:
        assert metric(cluster.url(name), "toymb_forwards_total") > 0
        assert metric(cluster.url(name), "toymb_owned_topics") == sum(1 for o in owners.values() if o == name)


def test_one_hop_only_and_a_disagreeing_node_names_the_owner(cluster: Cluster) -> None:
    topic = "orders"
    owner = owner_name(topic)
    other = next(n for n in NAMES if n != owner)
    # A request that already made its hop is never forwarded again.
    answer = publish(cluster.url(other), topic, "m1", headers={FORWARDED_HEADER: "toymb-x"})
    assert answer.status_code == 503
    assert answer.json()["error"] == "not_owner" and answer.json()["owner"] == owner
    assert cluster.rows(topic) == []
    answer = publish(cluster.url(owner), topic, "m1", headers={FORWARDED_HEADER: other})
    assert answer.status_code == 201
    for name in NAMES:
        info = requests.get(cluster.url(name) + "/v1/cluster", timeout=5).json()
        assert info["node"] == name
        assert {n["name"] for n in info["nodes"] if n["alive"]} == set(NAMES)
        assert all(n["id"] and n["url"].startswith("http://127.0.0.1:") and n["last_heartbeat"] > 0
                   for n in info["nodes"])


def _subscribe_push(cluster: Cluster, topic: str, group: str, url: str) -> str:
    def attempt() -> str | None:
        for name in NAMES:
            try:
                answer = requests.post(f"{cluster.url(name)}/v1/topics/{topic}/groups/{group}/subscribers",
                                       json={"mode": "push", "url": url, "start": "earliest", "id": "sink-1"},
                                       timeout=5)
            except requests.RequestException:
                continue
            if answer.status_code in (200, 201):
                return str(answer.json()["subscriber_id"])
        return None

    return str(wait_until(attempt, timeout=20, what="push subscription"))


def _heartbeats(cluster: Cluster, sid: str, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.wait(1.0):
            for name in NAMES:
                try:
                    if requests.post(f"{cluster.url(name)}/v1/subscribers/{sid}/heartbeat", timeout=2).ok:
                        break
                except requests.RequestException:
                    continue

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_owner_killed_during_publishes_and_pushes(cluster: Cluster) -> None:
    topic = "toymb-2"  # named after its owner, so we know whom to kill
    victim = owner_name(topic)
    assert victim == "toymb-2"
    survivors = [n for n in NAMES if n != victim]
    stop = threading.Event()
    with Receiver().running() as receiver:
        sid = _subscribe_push(cluster, topic, "sink", receiver.url)
        _heartbeats(cluster, sid, stop)
        # Clients spread over all three nodes, as users would configure them.
        urls = [cluster.url(n) for n in NAMES]
        publishers = [Publisher(f"c{i}", topic, urls[i:] + urls[:i], stop) for i in range(3)]
        for p in publishers:
            p.start()
        try:
            wait_until(lambda: sum(len(p.acked) for p in publishers) >= 60, timeout=30, what="steady stream")
            wait_until(lambda: len(receiver.received()) >= 20, timeout=30, what="pushes flowing")
            killed_at = time.monotonic()
            cluster.nodes[victim].kill()
            wait_until(lambda: any(a[1] > killed_at for p in publishers for a in p.acked),
                       timeout=4 * LEASE_S + 10, what="a publish after the kill")
            resumed = min(a[2] for p in publishers for a in p.acked if a[1] > killed_at) - killed_at
            acked_at_kill = sum(len(p.acked) for p in publishers)
            wait_until(lambda: sum(len(p.acked) for p in publishers) >= acked_at_kill + 60, timeout=30,
                       what="the stream going on after failover")
        finally:
            stop.set()
            for p in publishers:
                p.join(timeout=10)
        acked = {a[0] for p in publishers for a in p.acked}
        for p in publishers:
            assert not [e for e in p.errors if e.startswith("unexpected")], p.errors[:5]
        # Nothing acknowledged was lost, nothing stored twice, offsets still dense.
        stored = {r[2] for r in cluster.rows(topic)}
        assert acked <= stored, f"{len(acked - stored)} acknowledged messages are missing"
        cluster.assert_dense(topic)
        new_owner, epoch = cluster.topic_row(topic)
        assert new_owner == owner_name(topic, survivors) and epoch >= 2
        # Every acknowledged message reaches the push subscriber at least once.
        wait_until(lambda: acked <= receiver.received(), timeout=60, interval=0.2,
                   what="every acknowledged message pushed")
    assert resumed <= 2 * LEASE_S, f"publishes resumed {resumed:.2f}s after the owner died"


def test_frozen_old_owner_cannot_write_under_its_stale_epoch(cluster: Cluster) -> None:
    topic = "toymb-1"
    old = owner_name(topic)
    assert old == "toymb-1"
    others = [n for n in NAMES if n != old]
    for i in range(5):
        assert publish(cluster.url(old), topic, f"before-{i}", key="same").status_code == 201
    assert cluster.topic_row(topic) == (old, 1)

    cluster.nodes[old].signal(signal.SIGSTOP)
    stale: dict[str, requests.Response | Exception] = {}

    def send_to_frozen() -> None:
        # Accepted by the kernel now, handled by the node only after it is resumed.
        try:
            stale["answer"] = publish(cluster.url(old), topic, "stale-0", key="same", timeout=60)
        except requests.RequestException as exc:
            stale["answer"] = exc

    sender = threading.Thread(target=send_to_frozen, daemon=True)
    sender.start()
    try:
        def failed_over() -> bool:
            try:
                answer = publish(cluster.url(others[0]), topic, "after-0", key="same", timeout=3)
                return answer.status_code == 201
            except requests.RequestException:
                return False

        wait_until(failed_over, timeout=4 * LEASE_S + 10, interval=0.1, what="failover of the frozen owner")
        for i in range(1, 6):
            assert publish(cluster.url(others[i % 2]), topic, f"after-{i}", key="same").status_code == 201
        interim, interim_epoch = cluster.topic_row(topic)
        assert interim in others and interim_epoch == 2
        written_while_frozen = set(cluster.rows(topic))
    finally:
        cluster.nodes[old].signal(signal.SIGCONT)
    sender.join(timeout=70)
    answer = stale.get("answer")
    assert isinstance(answer, requests.Response), f"no answer from the resumed node: {answer!r}"
    if answer.status_code in (200, 201):
        # Stored only under a fresh claim (or by the owner it forwarded to), never at epoch 1.
        owner_now, epoch_now = cluster.topic_row(topic)
        if answer.headers.get(FORWARDED_TO_HEADER) is None:
            assert owner_now == old and epoch_now > interim_epoch
    else:
        assert answer.status_code == 503 and answer.json()["error"] in ("not_owner", "owner_unavailable")
    # The rows written while it was frozen are untouched; the partition stays dense.
    assert written_while_frozen <= set(cluster.rows(topic))
    cluster.assert_dense(topic)

    # It comes back: ownership moves back to it, without loss, under a new epoch.
    cluster.wait_live(set(NAMES))
    def moved_back() -> bool:
        try:
            reply = publish(cluster.url(others[1]), topic, "back-0", key="same", timeout=3)
        except requests.RequestException:
            return False
        return reply.status_code in (200, 201) and reply.headers.get(FORWARDED_TO_HEADER) == old

    wait_until(moved_back, timeout=4 * LEASE_S + 10, interval=0.1, what="ownership moving back")
    owner_now, epoch_now = cluster.topic_row(topic)
    assert owner_now == old and epoch_now > interim_epoch
    ids = {r[2] for r in cluster.rows(topic)}
    assert {f"before-{i}" for i in range(5)} | {f"after-{i}" for i in range(6)} | {"back-0"} <= ids
    cluster.assert_dense(topic)
