"""The publish bench's own load generator (without wrk): what it counts is what the node stored."""

from __future__ import annotations

import queue

import requests

from bench import publish
from tests.support import NodeProcess


def test_batch_client_counts_the_messages_the_node_stored(node_process: NodeProcess) -> None:
    url = f"{node_process.url}/v1/topics/bench-client/messages"
    result: queue.SimpleQueue[int] = queue.SimpleQueue()
    publish._batch_client(url, 0.5, result)
    sent = result.get(timeout=5)
    stored = requests.get(f"{node_process.url}/v1/topics/bench-client", timeout=10).json()["end_offsets"]
    assert sent > 0
    assert sent % publish.BATCH == 0
    assert sum(stored.values()) == sent
