"""A healthy publisher and push subscriber on another topic, measured while a hostile client attacks.

One node on PostgreSQL; each attack runs from its own threads for the whole measurement. The
bystander publishes one message at a time and waits for its push: every publish must succeed and
every push arrive, and the latencies are printed (no timing assertion).
"""

from __future__ import annotations

import base64
import json
import resource
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.delivery.support import Receiver
from tests.support import NodeProcess, wait_until

Attack = Callable[[NodeProcess, threading.Event], list[int]]


def _poison(node: NodeProcess, stop: threading.Event) -> list[int]:
    """Publishes that delivery could not render: deep JSON, lone surrogates, NaN, a 50,000-deep base64 body."""
    bodies = [
        {"content_type": "application/json",
         "body_base64": base64.b64encode(b"[" * 50_000 + b"]" * 50_000).decode()},
        {"body": json.loads("[" * 120 + "]" * 120)},  # allowed depth, for contrast: accepted
        {"content_type": "application/json", "body_base64": base64.b64encode(b'"\\ud800"').decode()},
        {"content_type": "application/json", "body_base64": base64.b64encode(b"[NaN, Infinity, 1e999]").decode()},
    ]
    raw = ('{"body": ' + "[" * 977 + "]" * 977 + "}").encode()
    statuses: list[int] = []
    with requests.Session() as http:
        while not stop.is_set():
            for body in bodies:
                statuses.append(http.post(f"{node.url}/v1/topics/poison/messages", json=body, timeout=30).status_code)
            statuses.append(http.post(f"{node.url}/v1/topics/poison/messages", data=raw, timeout=30,
                                      headers={"Content-Type": "application/json"}).status_code)
    return statuses


def _nul(node: NodeProcess, stop: threading.Event) -> list[int]:
    """Publishes with a NUL in the id, key, content type and a header, racing the bystander's commits."""
    statuses: list[int] = []
    n = 0
    with requests.Session() as http:
        while not stop.is_set():
            n += 1
            for body in ({"id": f"nul\u0000{n}", "body": 1}, {"key": "k\u0000", "body": 1},
                         {"content_type": "text/plain\u0000", "body_base64": "eA=="},
                         {"headers": {"h": "v\u0000"}, "body": 1}):
                statuses.append(http.post(f"{node.url}/v1/topics/nul/messages", json=body, timeout=30).status_code)
            statuses.append(http.post(f"{node.url}/sendmessage", timeout=30,
                                      json={"topicName": "nul", "key": "\u0000", "body": "x"}).status_code)
    return statuses


def _idle_sockets(node: NodeProcess, stop: threading.Event) -> list[int]:
    """1,200 connections that never send a byte, held open for the whole measurement."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:  # this test process holds the sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    held = []
    for _ in range(1200):
        try:
            held.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
        except OSError:
            break
    stop.wait()
    for sock in held:
        sock.close()
    return [len(held)]


ATTACKS: dict[str, Attack] = {"poison": _poison, "nul": _nul, "idle-sockets": _idle_sockets}


@pytest.fixture(scope="module")
def pg_node(tmp_path_factory: pytest.TempPathFactory, pg_available: bool) -> Iterator[NodeProcess]:
    from tests.conftest import PG_URL, reset_pg
    from tests.support import need_service

    need_service(pg_available, "PostgreSQL (services/postgres.sh)")
    reset_pg(PG_URL)
    env = {"TOYMB_PUSH_ALLOW": "127.0.0.0/8", "TOYMB_MAX_CONNECTIONS": "1000"}
    with NodeProcess(tmp_path_factory.mktemp("bystanders"), env=env, database_url=PG_URL) as node:
        yield node


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_bystander_publisher_and_push_subscriber_keep_working_during_an_attack(
        pg_node: NodeProcess, attack: str, receivers: list[Receiver]) -> None:
    receiver = Receiver()
    receivers.append(receiver)
    topic = f"bystander-{attack}"
    answer = requests.post(f"{pg_node.url}/subscribe", timeout=30, json={
        "topicName": topic, "groupName": f"b-{attack}", "type": "push", "ip": "127.0.0.1", "port": receiver.port})
    assert answer.status_code == 200, answer.text
    stop = threading.Event()
    results: list[list[int]] = []
    attacker = threading.Thread(target=lambda: results.append(ATTACKS[attack](pg_node, stop)), daemon=True)
    attacker.start()
    time.sleep(1.0)  # the attack is under way
    publish_ms: list[float] = []
    push_ms: list[float] = []
    try:
        with requests.Session() as http:
            for n in range(30):
                started = time.monotonic()
                sent = http.post(f"{pg_node.url}/v1/topics/{topic}/messages", json={"body": {"n": n}}, timeout=30)
                assert sent.status_code == 201, sent.text
                publish_ms.append((time.monotonic() - started) * 1000)
                wait_until(lambda n=n: len(receiver.acked) > n, timeout=30, interval=0.002,  # type: ignore[misc]
                           what=f"push {n} to the bystander")
                push_ms.append((time.monotonic() - started) * 1000)
    finally:
        stop.set()
        attacker.join(timeout=60)
    assert [json.loads(p["entity"])["n"] for p in receiver.acked] == list(range(30))
    (statuses,) = results
    if attack == "idle-sockets":
        assert statuses == [1200], "every idle connection was opened"
    else:
        assert statuses and 500 not in statuses and all(s in (201, 400) for s in statuses), sorted(set(statuses))
    print(f"\n{attack}: bystander publish p50 {statistics.median(publish_ms):.1f} ms max {max(publish_ms):.1f} ms; "
          f"publish-to-push p50 {statistics.median(push_ms):.1f} ms max {max(push_ms):.1f} ms "
          f"({len(statuses) if attack != 'idle-sockets' else statuses[0]} hostile requests/sockets)")
    health = requests.get(f"{pg_node.url}/health", timeout=30)
    assert health.status_code == 200
