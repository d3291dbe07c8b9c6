"""Push receivers that hurt only themselves: dripping answers, DNS rebinding, a narrowed allowlist."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.delivery.pusher import Pusher
from broker.security.allowlist import PushAllowlist
from tests.delivery.support import LiveNode, Receiver
from tests.support import NodeProcess, wait_until

from .test_allowlist import Listener, listeners  # noqa: F401 - the fixture


class Dripper:
    """A receiver that accepts pushes and answers one byte every ``every_s``: never timing out a read.

    ``head`` decides what is dripped: the status line itself (``status``), or a complete 200 head
    followed by a long body (``body``).
    """

    def __init__(self, drip: str, every_s: float = 0.5, length: int = 400) -> None:
        self.every_s = every_s
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length
        self.answer = answer + b"x" * length
        self.sent_at_once = len(answer) if drip == "body" else 0
        self.requests = 0
        self.open = 0         # connections now being dripped to
        self.finished = 0     # answers dripped to the end (the broker waited all along)
        self.cut = 0          # connections the broker closed mid-answer
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/push"
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            with self.lock:
                self.requests += 1
                self.open += 1
            try:
                conn.sendall(self.answer[:self.sent_at_once])
                for i in range(self.sent_at_once, len(self.answer)):
                    if self.stopping.wait(self.every_s):
                        return
                    conn.sendall(self.answer[i:i + 1])
                with self.lock:
                    self.finished += 1
            except OSError:
                with self.lock:
                    self.cut += 1
            finally:
                with self.lock:
                    self.open -= 1

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()


@pytest.fixture
def drippers() -> Iterator[list[Dripper]]:
    made: list[Dripper] = []
    yield made
    for d in made:
        d.close()


def _allow_all_loopback(url: str) -> list[str]:
    return PushAllowlist(["127.0.0.0/8"]).addresses(url)


@pytest.mark.parametrize("drip", ["status", "body"])
def test_a_dripping_receiver_holds_a_push_no_longer_than_its_total_deadline(
        drippers: list[Dripper], drip: str) -> None:
    dripper = Dripper(drip, every_s=0.2, length=400)  # 80 s to drip it all; each read within 0.2 s
    drippers.append(dripper)
    pusher = Pusher(1000, _allow_all_loopback)
    try:
        outcome = pusher.post(dripper.url, b"{}")
    finally:
        pusher.close()
    if drip == "status":
        assert not outcome.ok and outcome.reason.startswith("timeout"), outcome
    else:  # the status came in time: it counts, and the connection is dropped rather than drained
        assert outcome.ok, outcome
    wait_until(lambda: dripper.cut == 1, timeout=10, what="the broker closing the dripping connection")
    assert dripper.finished == 0


def test_slow_receivers_do_not_delay_other_subscribers_or_publishers(
        tmp_path: Path, drippers: list[Dripper], receivers: list[Receiver]) -> None:
    # More slow receivers than the old fixed pool of 8 push threads, dripping status or body.
    # Leases are not under test: no subscriber here heartbeats, so each lease must outlast the test.
    # (With the 2 s lease of FAST, a run slowed past 2 s by a loaded machine lost the healthy
    # subscriber's lease, and its next message waited for nobody.)
    live = LiveNode(tmp_path, push_timeout_ms=30000, push_max_attempts=100, subscriber_lease_ms=600_000)
    healthy = Receiver()
    receivers.append(healthy)
    try:
        for i in range(12):
            dripper = Dripper("status" if i % 2 else "body", every_s=1.0)
            drippers.append(dripper)
            live.subscribe(f"slow{i}", "g", mode="push", url=dripper.url)
            live.publish(f"slow{i}", [{"body": {"n": n}} for n in range(3)])
        wait_until(lambda: sum(d.open for d in drippers) == len(drippers), timeout=30,
                   what="every slow receiver being pushed to")
        live.subscribe("fast", "g", mode="push", url=healthy.url, start="latest")
        push_latency: list[float] = []
        publish_latency: list[float] = []
        for n in range(20):
            started = time.monotonic()
            live.publish("other", [{"body": {"n": n}}])  # a publisher with no subscriber at all
            publish_latency.append(time.monotonic() - started)
            started = time.monotonic()
            live.publish("fast", [{"id": f"fast-{n}", "body": {"n": n}}])
            wait_until(lambda n=n: f"fast-{n}" in {m["id"] for m in healthy.messages()}, timeout=20, interval=0.002,  # type: ignore[misc]
                       what=f"message {n} pushed to the healthy subscriber")
            push_latency.append(time.monotonic() - started)
        # The attack was on all along: every slow receiver still holds its push.
        assert sum(d.open for d in drippers) == len(drippers)
        assert sum(d.finished for d in drippers) == 0
        print(f"\nduring the attack: push p50 {statistics.median(push_latency) * 1000:.1f} ms, "
              f"max {max(push_latency) * 1000:.1f} ms; publish p50 "
              f"{statistics.median(publish_latency) * 1000:.1f} ms, max {max(publish_latency) * 1000:.1f} ms")
    finally:
        live.close()


def test_a_name_rebound_to_a_forbidden_address_gets_no_push(listeners: list[Listener]) -> None:  # noqa: F811
    # The same port on both addresses, as one name would have.
    port = _port_free_on("127.0.0.1", "127.0.0.2")
    allowed, forbidden = Listener("127.0.0.1", port=port), Listener("127.0.0.2", port=port)
    listeners += [allowed, forbidden]
    answers = {"now": "127.0.0.1"}
    # What a rebinding DNS server answers: first the allowed address, then the forbidden one.
    allowlist = PushAllowlist(["127.0.0.1/32"], resolver=lambda host, p: [answers["now"]])
    pusher = Pusher(2000, allowlist.addresses)
    try:
        allowlist(f"http://rebind.example:{port}/hook")  # registration passes
        assert pusher.post(f"http://rebind.example:{port}/hook", b"{}").ok
        assert len(allowed.requests) == 1
        answers["now"] = "127.0.0.2"
        pusher.close()  # no kept-alive connection: the next push connects again
        outcome = pusher.post(f"http://rebind.example:{port}/hook", b"{}")
        assert not outcome.ok and outcome.unreachable and "push_allow" in outcome.reason, outcome
    finally:
        pusher.close()
    assert forbidden.connections == 0 and forbidden.requests == []


def _port_free_on(*hosts: str) -> int:
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
            return port
        except OSError:
            continue
    raise AssertionError("no port free on every host")


@pytest.mark.slow
def test_a_node_restarted_with_a_narrower_allowlist_stops_pushing(
        tmp_path: Path, listeners: list[Listener]) -> None:  # noqa: F811
    receiver = Listener("127.0.0.1")
    listeners.append(receiver)
    env = {"TOYMB_PUSH_ALLOW": "127.0.0.0/8", "TOYMB_PUSH_BACKOFF_MS": "50", "TOYMB_PUSH_BACKOFF_MAX_MS": "200",
           "TOYMB_SUBSCRIBER_LEASE_MS": "2000"}
    node = NodeProcess(tmp_path, env=env).start()
    try:
        answer = requests.post(f"{node.url}/subscribe", json={
            "topicName": "narrow", "groupName": "g", "type": "push", "ip": "127.0.0.1", "port": receiver.port},
            timeout=10)
        assert answer.status_code == 200, answer.text
        assert requests.post(f"{node.url}/sendmessage", json={"topicName": "narrow", "body": "before"},
                             timeout=10).status_code in (200, 201)
        wait_until(lambda: len(receiver.requests) == 1, timeout=30, what="a push before the restart")
    finally:
        node.stop()
    node = NodeProcess(tmp_path, port=node.port, env={**env, "TOYMB_PUSH_ALLOW": "127.0.0.2/32"}).start()
    try:
        assert requests.post(f"{node.url}/sendmessage", json={"topicName": "narrow", "body": "after"},
                             timeout=10).status_code in (200, 201)

        def revoked() -> Any:
            state = requests.get(f"{node.url}/v1/topics/narrow/groups/g", timeout=10).json()
            return [s["revoked"] for s in state["subscribers"]] == [True]

        # Refused at every connect, the subscriber counts as unreachable and loses its lease.
        wait_until(revoked, timeout=30, what="the refused subscriber losing its lease")
    finally:
        node.stop()
    assert len(receiver.requests) == 1 and b"after" not in receiver.requests[0]
