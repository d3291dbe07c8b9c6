"""Many ToyMB push subscribers whose receivers are gone: they cost nothing idle, and they expire."""

from __future__ import annotations

import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from bench.common import peak_rss_mb
from tests.delivery.support import Receiver
from tests.support import NodeProcess, free_port, wait_until

GHOSTS = 1000


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_idle_toymb_push_subscribers_cost_nothing_and_expire_when_pushes_find_nobody(tmp_path: Path) -> None:
    env = {"TOYMB_PUSH_ALLOW": "127.0.0.0/8", "TOYMB_SUBSCRIBER_LEASE_MS": "3000",
           "TOYMB_PUSH_BACKOFF_MS": "50", "TOYMB_PUSH_BACKOFF_MAX_MS": "500"}
    healthy = Receiver()
    gone = free_port()  # nobody listens there: pushes are refused at once
    with NodeProcess(tmp_path, env=env) as node, requests.Session() as http:
        pid = node.proc.pid  # type: ignore[union-attr]

        # One keep-alive session per registering thread (a Session is not thread-safe): a new
        # connection per request cost ~1 CPU-s more over the 1,000 registrations (0.4 of it here,
        # the rest in the node), and registering is not what this test is about.
        sessions = threading.local()
        opened: list[requests.Session] = []

        def subscribe(topic: str, group: str, port: int) -> str:
            if not hasattr(sessions, "http"):
                sessions.http = requests.Session()
                opened.append(sessions.http)
            answer = sessions.http.post(f"{node.url}/subscribe", json={
                "topicName": topic, "groupName": group, "type": "push", "ip": "127.0.0.1", "port": port},
                timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.text

        # A ToyMB driver that restarted many times: each start left a subscriber whose receiver is gone.
        with ThreadPoolExecutor(8) as pool:
            ghosts = list(pool.map(lambda i: subscribe("ghosts", f"g{i}", gone), range(GHOSTS)))
        subscribe("live", "app", healthy.port)
        for session in opened:
            session.close()
        time.sleep(3)  # registration's own work settles

        before = _cpu_s(pid)
        time.sleep(5)
        idle_cpu = _cpu_s(pid) - before
        latency: list[float] = []
        for n in range(20):
            started = time.monotonic()
            assert http.post(f"{node.url}/sendmessage", json={"topicName": "live", "body": f"m{n}"},
                             timeout=10).text == "ack"
            wait_until(lambda n=n: len(healthy.acked) > n, timeout=20, interval=0.002,  # type: ignore[misc]
                       what=f"push {n} to the healthy receiver")
            latency.append(time.monotonic() - started)
        print(f"\n{GHOSTS} idle subscribers: node CPU {idle_cpu / 5 * 100:.1f}% while idle; healthy push "
              f"p50 {statistics.median(latency) * 1000:.1f} ms, max {max(latency) * 1000:.1f} ms; "
              f"peak RSS {peak_rss_mb(pid):.0f} MiB")
        # The old dispatcher re-read every group every 2 s: 0.6 to 1.2 cores for these 1,000.
        assert idle_cpu < 1.5, f"{idle_cpu:.2f} CPU-seconds in 5 idle seconds"
        assert [p["entity"] for p in healthy.acked] == [f"m{n}" for n in range(20)]

        # Now a message for them: every push finds nobody, and after a lease period each expires.
        assert http.post(f"{node.url}/sendmessage", json={"topicName": "ghosts", "body": "hello?"},
                         timeout=10).text == "ack"

        def revoked(i: int) -> bool:
            state = http.get(f"{node.url}/v1/topics/ghosts/groups/g{i}", timeout=10).json()
            return [s["revoked"] for s in state["subscribers"]] == [True]

        wait_until(lambda: all(revoked(i) for i in range(0, GHOSTS, 97)), timeout=120,
                   what="the ghost subscribers expiring")
        wait_until(lambda: all(revoked(i) for i in range(GHOSTS)), timeout=60, what="every ghost expiring")
        assert len(ghosts) == len(set(ghosts)) == GHOSTS
        assert peak_rss_mb(pid) < 300
    healthy.stop()
