"""A seek survives an owner failover: the next owner replays exactly the messages from the sought time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.cluster.harness import NAMES, Cluster, owner_name, private_database
from tests.cluster.test_cluster_pg import _heartbeats, _subscribe_push
from tests.delivery.support import Receiver
from tests.delivery.test_seek import T0, batch, replayed_in_order
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    nodes = Cluster(tmp_path, private_database(pg_url))
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def test_seek_then_owner_killed_replays_exactly_from_the_timestamp(cluster: Cluster) -> None:
    topic = "toymb-2"  # named after its owner, so we know whom to kill
    assert owner_name(topic) == "toymb-2"
    entry = cluster.url("toymb-1")  # every call goes through another node, forwarded to the owner
    hold = threading.Event()  # while set, the receiver refuses pushes: the old owner cannot deliver the replay
    receiver = Receiver(lambda _payload: 503 if hold.is_set() else 200)
    stop = threading.Event()
    try:
        sid = _subscribe_push(cluster, topic, "sink", receiver.url)
        _heartbeats(cluster, sid, stop)
        # Refused pushes are retried, not dead-lettered, for as long as this test holds them back.
        policy = requests.post(f"{entry}/v1/topics/{topic}/groups/sink/subscribers", timeout=10, json={
            "mode": "pull", "dead_letter": {"max_attempts": 100, "min_backoff_ms": 50, "max_backoff_ms": 200}})
        assert policy.status_code == 201, policy.text
        requests.delete(f"{entry}/v1/topics/{topic}/groups/sink/subscribers/{policy.json()['subscriber_id']}",
                        timeout=10)
        for messages in (batch("old", 30, T0), batch("new", 30, T0 + 10_000)):
            answer = requests.post(f"{entry}/v1/topics/{topic}/messages", json={"messages": messages}, timeout=10)
            assert answer.status_code == 201, answer.text
        later = list(answer.json()["messages"])

        def group_lag() -> int:
            return int(requests.get(f"{entry}/v1/topics/{topic}/groups/sink", timeout=5).json()["total_lag"])
        wait_until(lambda: len(receiver.messages()) >= 60 and group_lag() == 0, timeout=30, what="first delivery")
        mark = len(receiver.messages())
        hold.set()
        sought = requests.post(f"{entry}/v1/topics/{topic}/groups/sink/seek", json={"timestamp": T0 + 10_000},
                               timeout=10)
        assert sought.status_code == 200, sought.text
        cluster.nodes["toymb-2"].kill()
        survivors = {n for n in NAMES if n != "toymb-2"}
        cluster.wait_live(survivors)
        hold.clear()
        wait_until(lambda: {m["id"] for m in receiver.messages()[mark:]} >= {m["id"] for m in later},
                   timeout=60, what="the replay from the next owner")
        replayed_in_order(receiver.messages()[mark:], later)
    finally:
        stop.set()
        receiver.stop()
