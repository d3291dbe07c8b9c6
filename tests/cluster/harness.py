"""A 3-node ToyMB cluster on PostgreSQL, as real processes, plus a push receiver and a retrying client."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from broker.cluster.ownership import Member, owner
from broker.node import node_id
from broker.store import Store
from tests.support import NodeProcess, own_database, stored_messages, wait_until, worker_name

NAMES = ("toymb-1", "toymb-2", "toymb-3")
LEASE_MS = 2000
HEARTBEAT_MS = 300
CLUSTER_DB = worker_name("toymb_cluster_test")


def private_database(server_url: str) -> str:
    """A database of the cluster tests' own on the test server, emptied.

    Other test folders reset ``toymb_test`` whenever they start; nodes running for tens of
    seconds here must not have their tables dropped under them.
    """
    own = own_database(server_url, CLUSTER_DB)
    store = Store(own)
    store.drop_schema()
    store.dispose()
    return own


def members(names: Iterable[str] = NAMES) -> list[Member]:
    return [Member(n, node_id(n)) for n in names]


def owner_name(topic: str, names: Iterable[str] = NAMES) -> str:
    chosen = owner(topic, members(names))
    assert chosen is not None
    return chosen.name


class Cluster:
    def __init__(self, base: Path, database_url: str, extra_env: dict[str, str] | None = None,
                 token: str | None = None) -> None:
        # The harness's own calls (the live-set checks) carry ``token`` when the nodes require tokens.
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        env = {"TOYMB_NODE_LEASE_MS": str(LEASE_MS), "TOYMB_HEARTBEAT_MS": str(HEARTBEAT_MS),
               "TOYMB_PUSH_ALLOW": "127.0.0.0/8", "TOYMB_SUBSCRIBER_LEASE_MS": "30000",
               "TOYMB_PUSH_BACKOFF_MS": "50", "TOYMB_PUSH_BACKOFF_MAX_MS": "500", "TOYMB_THREADS": "16",
               **(extra_env or {})}
        self.nodes = {n: NodeProcess(base / n, name=n, env=env, database_url=database_url) for n in NAMES}
        self.store = Store(database_url)

    def start(self) -> Cluster:
        for node in self.nodes.values():
            node.start(wait=False)
        for node in self.nodes.values():
            node.wait_ready()
        self.wait_live(set(NAMES))
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            node.signal(signal.SIGCONT)  # a frozen node cannot hear SIGTERM
            node.stop()
        self.store.dispose()

    def url(self, name: str) -> str:
        return self.nodes[name].url

    def wait_live(self, names: set[str], on: Iterable[str] | None = None, timeout: float = 30) -> None:
        """Until every node in ``on`` (default: ``names``) sees exactly ``names`` live."""
        def agreed() -> bool:
            for n in on or names:
                try:
                    view = requests.get(self.url(n) + "/v1/cluster", headers=self.headers, timeout=2).json()
                except (requests.RequestException, ValueError):
                    return False
                if set(view["live"]) != names:
                    return False
            return True

        wait_until(agreed, timeout=timeout, interval=0.1, what=f"live set {sorted(names)}")

    # -- SQL views of what happened -----------------------------------------------------------

    def rows(self, topic: str) -> list[tuple[int, int, str]]:
        return [(r.partition, r.offset, r.id) for r in stored_messages(self.store, topic)]

    def topic_row(self, topic: str) -> tuple[str | None, int]:
        row = self.store.get_topic(topic)
        assert row is not None, f"topic {topic} was never created"
        return row.owner, row.epoch

    def assert_dense(self, topic: str) -> None:
        """Offsets 0..n-1 in every partition, every id once, and next_offset matching the rows."""
        rows = self.rows(topic)
        ids = [r[2] for r in rows]
        assert len(ids) == len(set(ids)), "an id was stored twice"
        by_partition: dict[int, list[int]] = {}
        for p, o, _ in rows:
            by_partition.setdefault(p, []).append(o)
        ends = self.store.end_offsets(topic)
        for p, offsets in by_partition.items():
            assert sorted(offsets) == list(range(len(offsets))), f"partition {p} has gaps: {sorted(offsets)}"
            assert ends[p] == len(offsets), f"partition {p}: next_offset {ends[p]} but {len(offsets)} rows"


class Receiver:
    """A real HTTP push receiver: records every message id it is pushed."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver.lock:
                    receiver.ids.extend(m["id"] for m in body.get("messages", []))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/push"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def received(self) -> set[str]:
        with self.lock:
            return set(self.ids)

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def publish(url: str, topic: str, msg_id: str, key: str | None = None, timeout: float = 5.0,
            headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(f"{url}/v1/topics/{topic}/messages",
                         json={"id": msg_id, "key": key, "body": {"n": msg_id}}, headers=headers or {},
                         timeout=timeout)


class Publisher(threading.Thread):
    """A client publishing fixed ids in order, retrying each on any node until it is acknowledged."""

    def __init__(self, name: str, topic: str, urls: list[str], stop: threading.Event,
                 max_messages: int = 10_000, headers: dict[str, str] | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.topic, self.urls, self.stop_event, self.max = topic, urls, stop, max_messages
        self.headers = headers
        self.acked: list[tuple[str, float, float]] = []  # (id, attempt started, acked) in monotonic time
        self.errors: list[str] = []
        self.statuses: Counter[int] = Counter()  # every HTTP answer's status

    def run(self) -> None:
        turn = 0
        for i in range(self.max):
            msg_id = f"{self.name}-{i}"
            while True:
                if self.stop_event.is_set():
                    return
                url = self.urls[turn % len(self.urls)]
                turn += 1
                started = time.monotonic()
                try:
                    answer = publish(url, self.topic, msg_id, key=msg_id, timeout=3, headers=self.headers)
                except requests.RequestException as exc:
                    self.errors.append(type(exc).__name__)
                    time.sleep(0.05)
                    continue
                self.statuses[answer.status_code] += 1
                if answer.status_code in (200, 201):
                    self.acked.append((msg_id, started, time.monotonic()))
                    break
                if answer.status_code != 503:
                    self.errors.append(f"unexpected {answer.status_code}: {answer.text[:200]}")
                else:
                    self.errors.append(answer.json().get("error", "?"))
                time.sleep(0.05)
            time.sleep(0.01)
