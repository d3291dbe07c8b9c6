"""Several pushes in flight to one subscriber (``push_in_flight``), never two on one partition."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.partitioning import partition_for
from tests.delivery.conftest import STEADY_LEASE_MS
from tests.delivery.support import LiveNode, Receiver, first_seen_in_order
from tests.support import wait_until


def keys_on_distinct_partitions(count: int, partitions: int = 100) -> list[str]:
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < count:
        keys.setdefault(partition_for(f"key{n}", partitions), f"key{n}")
        n += 1
    return list(keys.values())


class HoldingReceiver:
    """While ``gate`` is shut, holds every push until it opens (or ``hold_s`` passed); records what overlapped."""

    def __init__(self, hold_s: float) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.in_flight: list[set[int]] = []   # partitions of each push being answered
        self.most = 0                         # most pushes answered at once
        self.shared_partition = False         # two pushes at once held the same partition
        self.receiver = Receiver(self._respond)
        self.hold_s = hold_s

    def _respond(self, payload: dict[str, Any]) -> int:
        parts = {m["partition"] for m in payload["messages"]}
        with self.lock:
            self.shared_partition |= any(parts & other for other in self.in_flight)
            self.in_flight.append(parts)
            self.most = max(self.most, len(self.in_flight))
        self.gate.wait(self.hold_s)
        with self.lock:
            self.in_flight.remove(parts)
        return 200


@pytest.mark.parametrize("in_flight", [1, 3])
def test_pushes_overlap_up_to_the_setting_and_never_on_one_partition(tmp_path: Path, in_flight: int) -> None:
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS, push_in_flight=in_flight, push_timeout_ms=30_000)
    held = HoldingReceiver(hold_s=20.0 if in_flight > 1 else 1.5)
    try:
        node.subscribe("overlap", "g", mode="push", url=held.receiver.url)
        first, second, third, fourth = keys_on_distinct_partitions(4)
        # A new subscriber's first push looks at all its partitions at once; let it pass, so the
        # pushes below each hold only the partitions that had news.
        node.publish("overlap", [{"id": "warm", "key": fourth, "body": -1}])
        wait_until(lambda: held.receiver.messages(), timeout=30, what="the first push")
        held.gate.clear()
        node.publish("overlap", [{"id": "a0", "key": first, "body": 0}])
        wait_until(lambda: held.most >= 1, timeout=30, what="the first push is being answered")
        # While it is held: a later message of the same partition, and two of other partitions.
        node.publish("overlap", [{"id": "a1", "key": first, "body": 1}, {"id": "b0", "key": second, "body": 2},
                                 {"id": "c0", "key": third, "body": 3}])
        if in_flight > 1:
            wait_until(lambda: held.most >= 2, timeout=30,
                       what="a second push, for the other partitions, while the first is held")
            held.gate.set()
        # With one in flight the gate stays shut: each push is held hold_s, time for a second
        # push to arrive meanwhile if one were sent.
        wait_until(lambda: {m["id"] for m in held.receiver.messages()} == {"warm", "a0", "a1", "b0", "c0"}, timeout=60,
                   what="every message delivered")
        assert not held.shared_partition, "two pushes in flight at once held the same partition"
        assert first_seen_in_order(held.receiver.messages())
        if in_flight == 1:
            assert held.most == 1, "with push_in_flight=1 a push waited for the one before it"
        else:
            assert 2 <= held.most <= in_flight
    finally:
        held.gate.set()
        node.close()
        held.receiver.stop()



def test_a_backlog_goes_out_in_full_batches_several_in_flight(tmp_path: Path) -> None:
    """A subscriber starting on a backlog gets it as several full-batch pushes at once, not one
    push that holds every partition while its round trip runs."""
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS, push_in_flight=3, push_batch=10,
                    push_timeout_ms=30_000)
    held = HoldingReceiver(hold_s=20.0)
    try:
        keys = keys_on_distinct_partitions(3)
        node.publish("backlog", [{"key": key, "body": n} for key in keys for n in range(10)])
        held.gate.clear()
        node.subscribe("backlog", "g", mode="push", url=held.receiver.url, start="earliest")
        wait_until(lambda: held.most >= 3, timeout=30, what="three pushes, one per deep partition, at once")
        held.gate.set()
        wait_until(lambda: len(held.receiver.messages()) == 30, timeout=60, what="every message delivered")
        assert not held.shared_partition, "two pushes in flight at once held the same partition"
        assert first_seen_in_order(held.receiver.messages())
        assert all(len(payload["messages"]) <= 10 for payload in held.receiver.requests)
    finally:
        held.gate.set()
        node.close()
        held.receiver.stop()


def test_a_deep_partition_does_not_starve_a_shallow_one(tmp_path: Path) -> None:
    """Rounds look at partitions round robin: with one push in flight, a partition holding one
    message goes out in the second push, not after a deep partition's whole backlog."""
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS, push_in_flight=1, push_batch=5)
    receiver = Receiver()
    try:
        keys = sorted(keys_on_distinct_partitions(2), key=lambda k: partition_for(k, 100))
        deep, shallow = keys  # the deep partition comes first in the subscriber's partitions
        node.publish("fair", [{"key": deep, "body": n} for n in range(40)] + [{"key": shallow, "body": "alone"}])
        node.subscribe("fair", "g", mode="push", url=receiver.url, start="earliest")
        wait_until(lambda: len(receiver.messages()) == 41, timeout=60, what="every message delivered")
        pushes_until_shallow = next(i for i, payload in enumerate(receiver.acked, 1)
                                    if any(m["body"] == "alone" for m in payload["messages"]))
        assert pushes_until_shallow <= 2, f"the shallow partition waited for {pushes_until_shallow - 1} pushes"
        assert first_seen_in_order(receiver.messages())
    finally:
        node.close()
        receiver.stop()


def test_a_node_stopping_with_pushes_in_flight_starts_no_more(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Pushes that end while the node stops start no further ones on a pool being shut down."""
    node = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS, push_in_flight=3, push_batch=5)
    held = HoldingReceiver(hold_s=0.3)
    held.gate.clear()
    try:
        keys = keys_on_distinct_partitions(3)
        node.publish("stopping", [{"key": key, "body": n} for key in keys for n in range(20)])
        node.subscribe("stopping", "g", mode="push", url=held.receiver.url, start="earliest")
        wait_until(lambda: held.most >= 3, timeout=30, what="three pushes in flight")
        with caplog.at_level(logging.ERROR, logger="broker"):
            node.close()  # the held pushes end while the dispatcher's pools shut down
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        held.gate.set()
        held.receiver.stop()
