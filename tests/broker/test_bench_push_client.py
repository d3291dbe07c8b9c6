"""The push bench's own publisher and receiver: every message it stamps is stored, pushed and timed."""

from __future__ import annotations

import http.client
import json

import requests

from bench import push
from tests.support import NodeProcess


def test_latency_run_delivers_and_times_every_message_it_published(node_process: NodeProcess) -> None:
    result = push.measure_latency(node_process.url, 0.3)
    sent = result["latency_messages"]
    stored = requests.get(f"{node_process.url}/v1/topics/bench-latency", timeout=10).json()["end_offsets"]
    assert sent == 30 * push.PER_TICK
    assert sum(stored.values()) == sent
    assert result["latency_delivered"] == sent
    assert result["latency_p50_ms"] <= result["latency_p99_ms"] <= result["latency_max_ms"]


def test_receiver_takes_several_pushes_on_one_kept_alive_connection() -> None:
    receiver = push.CountingReceiver()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", receiver.server.server_address[1], timeout=10)
        for n in (2, 3):
            body = json.dumps({"messages": [{"body": {"sent_ns": 1}} for _ in range(n)]}).encode()
            conn.request("POST", "/push", body, {"Content-Type": "application/json", "X-Other": "a: b"})
            answer = conn.getresponse()
            assert (answer.status, answer.read()) == (200, b"ok")
        conn.close()
        assert (receiver.count, receiver.requests, len(receiver.latencies_ms)) == (5, 2, 5)
    finally:
        receiver.close()
