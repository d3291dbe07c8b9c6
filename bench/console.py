"""Console benchmark: the node CPU that one console refresh per second costs.

    python -m bench.console [--quick]      (or: toymb bench --only console)

One node (SQLite) holds 20 topics of 100 partitions, each with a push group (kept up to date by a
local receiver) and a pull group: 40 groups. Two states are measured, in the same run:

- ``caught_up``: every group has consumed everything (the usual state of a healthy cluster);
- ``backlog``: the pull groups are 1,000 messages behind on each topic, so all 2,000 of their
  partitions lag: the expensive case, as every lagging partition is read and watched for stuck.

In each state, two idle windows of equal length, without and with one overview request per
second: their difference over the requests is the node CPU of one refresh. Then a full publish
load (closed-loop clients, batches of 10, pushed to the receiver) gives the node's CPU when it
works as hard as it can here.

Criterion: one refresh per second costs at most 5% of the node's CPU, taken as the node under
that full load (``share_of_loaded_node``); the share of one core is printed beside it. Figures
from one run only: this machine's speed changes from day to day and with its other users.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from bench.common import BenchNode, report, write_results

TOKEN = "bench-admin"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TOPICS = 20
BACKLOG = 1000          # messages per topic before measuring (the pull groups' lag)
LOAD_BATCH = 10
LOAD_CLIENTS = 4
CRITERION = 0.05
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Receiver:
    """A push receiver that acknowledges everything."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/push"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def prepare(url: str, receiver: Receiver) -> None:
    """The topics and groups, with the push groups caught up and the pull groups as well."""
    with requests.Session() as s:
        s.headers.update(HEADERS)
        for t in range(TOPICS):
            topic = f"bench.console.{t}"
            s.put(f"{url}/v1/topics/{topic}", json={"partitions": 100}, timeout=10)
            s.post(f"{url}/v1/topics/{topic}/groups/pushed/subscribers",
                   json={"mode": "push", "url": receiver.url, "start": "earliest"}, timeout=10).raise_for_status()
            s.post(f"{url}/v1/topics/{topic}/groups/pulled/subscribers",
                   json={"mode": "pull", "start": "latest"}, timeout=10).raise_for_status()


def add_backlog(url: str) -> None:
    """Publish ``BACKLOG`` messages to each topic; the pull groups do not fetch them."""
    with requests.Session() as s:
        s.headers.update(HEADERS)
        for t in range(TOPICS):
            for start in range(0, BACKLOG, 500):
                s.post(f"{url}/v1/topics/bench.console.{t}/messages", json={"messages": [
                    {"key": f"k{i}", "body": {"i": i}} for i in range(start, start + 500)]},
                       timeout=60).raise_for_status()
        # Let the push groups catch up, so the windows measure steady state, not a push backlog.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            lags = [s.get(f"{url}/v1/topics/bench.console.{t}/groups/pushed", timeout=10).json()["total_lag"]
                    for t in range(TOPICS)]
            if not any(lags):
                return
            time.sleep(0.5)
        raise RuntimeError("the push groups did not catch up in 120 s")


def publish_load(url: str, stop: threading.Event) -> None:
    """One closed-loop client: the next batch as soon as the last is acknowledged."""
    with requests.Session() as s:
        s.headers.update(HEADERS)
        n = 0
        while not stop.is_set():
            topic = f"bench.console.{n % TOPICS}"
            s.post(f"{url}/v1/topics/{topic}/messages", json={"messages": [
                {"key": f"l{n}-{i}", "body": "x" * 200} for i in range(LOAD_BATCH)]}, timeout=30).raise_for_status()
            n += 1


def loaded_cpu_per_s(node: BenchNode, seconds: float) -> float:
    """The node's CPU per second under ``LOAD_CLIENTS`` closed-loop publishers."""
    stop = threading.Event()
    clients = [threading.Thread(target=publish_load, args=(node.url, stop), daemon=True) for _ in range(LOAD_CLIENTS)]
    for client in clients:
        client.start()
    time.sleep(1.0)  # the clients' start-up is not measured
    before = cpu_s(node.pid)
    time.sleep(seconds)
    used = cpu_s(node.pid) - before
    stop.set()
    for client in clients:
        client.join(30)
    return used / seconds


def refresh_cost(node: BenchNode, seconds: float) -> tuple[float, int, int]:
    """Node CPU seconds of one overview refresh: (window with one a second - window without) / refreshes.

    Also returns the number of refreshes and the overview's size in bytes.
    """
    before = cpu_s(node.pid)
    time.sleep(seconds)
    idle = cpu_s(node.pid) - before
    refreshes, size = 0, 0
    with requests.Session() as s:
        s.headers.update(HEADERS)
        before, started = cpu_s(node.pid), time.monotonic()
        while time.monotonic() - started < seconds:
            size = len(s.get(node.url + "/console/api/overview", timeout=30).content)
            refreshes += 1
            time.sleep(max(0.0, started + refreshes - time.monotonic()))
        polled = cpu_s(node.pid) - before
    return max(0.0, polled - idle) / max(1, refreshes), refreshes, size


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    seconds = 8.0 if quick else 20.0
    receiver = Receiver()
    # Subscribers do not heartbeat here: a long lease keeps them members for the whole run.
    env = {"TOYMB_TOKENS": f"{TOKEN}=admin", "TOYMB_PUSH_ALLOW": "127.0.0.0/8", "TOYMB_SUBSCRIBER_LEASE_MS": "3600000"}
    results: dict[str, Any] = {"topics": TOPICS, "groups": 2 * TOPICS, "partitions_per_topic": 100,
                               "window_s": seconds, "criterion": CRITERION}
    try:
        with BenchNode(env) as node:
            prepare(node.url, receiver)
            requests.get(node.url + "/console/api/overview", headers=HEADERS, timeout=30).raise_for_status()
            caught_up, refreshes, size = refresh_cost(node, seconds)
            add_backlog(node.url)
            backlog, _, backlog_size = refresh_cost(node, seconds)
            loaded = loaded_cpu_per_s(node, seconds)
    finally:
        receiver.close()
    results.update({
        "refreshes_per_window": refreshes, "caught_up_overview_bytes": size, "backlog_overview_bytes": backlog_size,
        "caught_up_cpu_ms_per_refresh": caught_up * 1000, "backlog_cpu_ms_per_refresh": backlog * 1000,
        "loaded_node_cpu_per_s": loaded,
        "caught_up_share_of_loaded_node": caught_up / loaded, "backlog_share_of_loaded_node": backlog / loaded,
        "caught_up_share_of_one_core": caught_up, "backlog_share_of_one_core": backlog,
    })
    results["passes"] = results["backlog_share_of_loaded_node"] <= CRITERION
    report("console: node CPU of one overview refresh per second", results)
    write_results(out_dir, "console", results, bars={
        "caught up: share of the loaded node's CPU": results["caught_up_share_of_loaded_node"],
        "2,000 lagging partitions: share of the loaded node's CPU": results["backlog_share_of_loaded_node"],
        "criterion": CRITERION}, ylabel="fraction of the node's CPU, one refresh per second")
    return results


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
