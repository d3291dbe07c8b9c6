"""Cluster benchmark on PostgreSQL: failover time, and 3-node publish throughput vs one node.

    python -m bench.cluster [--quick]      (or: toymb bench --only cluster)

- Failover: a topic's owner is SIGKILLed while a client keeps publishing to the other nodes;
  the time until the first publish to that topic succeeds again, in seconds and in lease periods.
- Throughput: the same client processes publish to many topics, first all to one node, then
  spread over three nodes (so two thirds of the requests are forwarded one hop), in batches of
  10, and on three nodes in batches of 100 too: the issue's target compares batched publish
  (100 x 256 B, as on one node) with bare ``executemany`` (1,000 rows a commit). The ratio is
  cluster / single node, measured in the same run on the same database server. On a 2-core
  machine the three nodes and the clients share the cores, so expect a ratio near or below 1:
  the figure shows the cost of forwarding, not the scaling of a real multi-host cluster.
  The clients are wrk processes (one per node) when wrk is installed, else Python processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench import ceilings
from bench.common import BenchNode, own_peak_rss_mb, peak_rss_mb, report, write_results
from broker.cluster.ownership import Member, owner
from broker.node import node_id
from broker.store import Store
from broker.store.sql import normalize_url

PG_URL = os.environ.get("TOYMB_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:15432/toymb")
BENCH_DB = "toymb_cluster_bench"
NAMES = ("toymb-1", "toymb-2", "toymb-3")
LEASE_MS = 2000
HEARTBEAT_MS = 300
BATCH = 10          # messages a request, as the first measurement
BIG_BATCH = 100     # as the single-node batched publish target (100 x 256 B)
BODY = "x" * 256


def _database() -> str | None:
    """An emptied database of this benchmark's own, or None when PostgreSQL is not running."""
    try:
        url = make_url(normalize_url(PG_URL))
        admin = create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            query = text("SELECT 1 FROM pg_database WHERE datname = :d")
            found = conn.execute(query, {"d": BENCH_DB}).first()
            if found is None:
                conn.execute(text(f'CREATE DATABASE "{BENCH_DB}"'))
        admin.dispose()
    except Exception as exc:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        print(f"cluster bench skipped: PostgreSQL not reachable at {PG_URL} ({type(exc).__name__}); "
              "run services/postgres.sh start")
        return None
    own = url.set(database=BENCH_DB).render_as_string(hide_password=False)
    store = Store(own)
    store.drop_schema()
    store.dispose()
    return own


def _node(name: str, database_url: str) -> BenchNode:
    return BenchNode({"TOYMB_NODE_NAME": name, "TOYMB_DATABASE_URL": database_url,
                      "TOYMB_NODE_LEASE_MS": str(LEASE_MS), "TOYMB_HEARTBEAT_MS": str(HEARTBEAT_MS)})


def _wait_live(urls: list[str], count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(len(requests.get(u + "/v1/cluster", timeout=2).json()["live"]) == count for u in urls):
                return
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the cluster did not agree on {count} live nodes")


def _client(urls: list[str], topics: list[str], seconds: float, seed: int, result: Any, batch: int) -> None:
    session = requests.Session()
    sent = failed = 0
    i = seed
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        i += 1
        url, topic = urls[i % len(urls)], topics[(i * 7 + seed) % len(topics)]
        payload = {"messages": [{"key": f"k{i}-{j}", "body": BODY, "content_type": "text/plain"}
                                for j in range(batch)]}
        try:
            answer = session.post(f"{url}/v1/topics/{topic}/messages", data=json.dumps(payload),
                                  headers={"Content-Type": "application/json"}, timeout=30)
        except requests.RequestException:
            failed += 1
            continue
        if answer.status_code == 201:
            sent += batch
        else:
            failed += 1
    result.put((sent, failed))


# One wrk per node: each connection posts batches to the 24 topics in turn (most go to another
# node's topic, so they are forwarded). wrk, not Python clients, when it is installed: a Python
# client spends more CPU on a request than a node, on the same two cores, and the ratio would
# measure the clients as much as the cluster.
_WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = %s
local topics = {%s}
local i = %d
request = function()
  i = i + 1
  return wrk.format(nil, "/v1/topics/" .. topics[(i %% #topics) + 1] .. "/messages")
end
"""
_WRK_TOTAL = re.compile(r"(\d+) requests in ([\d.]+)(m?s)")
_WRK_FAILED = re.compile(r"Non-2xx or 3xx responses: (\d+)")


def _throughput_wrk(urls: list[str], clients: int, topics: list[str], seconds: float,
                    batch: int) -> tuple[float, int]:
    body = json.dumps({"messages": [{"key": f"k{j}", "body": BODY, "content_type": "text/plain"}
                                    for j in range(batch)]})
    names = ", ".join(json.dumps(t) for t in topics)
    scripts, procs = [], []
    for n, url in enumerate(urls):
        connections = clients // len(urls) + (1 if n < clients % len(urls) else 0)
        if connections == 0:
            continue
        script = Path(tempfile.mkstemp(suffix=".lua")[1])
        script.write_text(_WRK_SCRIPT % (json.dumps(body), names, n * 7))
        scripts.append(script)
        procs.append(subprocess.Popen(["wrk", "-t", "1", "-c", str(connections), "-d", f"{int(seconds)}s",
                                       "-s", str(script), url], stdout=subprocess.PIPE, text=True))
    rate, failed = 0.0, 0
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=seconds + 60)
            total = _WRK_TOTAL.search(out)
            if total is None:
                raise RuntimeError(f"wrk printed no total:\n{out}")
            errors = _WRK_FAILED.search(out)
            bad = int(errors.group(1)) if errors else 0
            elapsed = float(total.group(2)) * (60.0 if total.group(3) == "m" else 1.0)
            rate += (int(total.group(1)) - bad) * batch / elapsed
            failed += bad
    finally:
        for script in scripts:
            script.unlink()
    return rate, failed


def _throughput(urls: list[str], clients: int, seconds: float, batch: int = BATCH) -> tuple[float, int]:
    topics = [f"bench-{i}" for i in range(24)]
    if shutil.which("wrk"):
        return _throughput_wrk(urls, clients, topics, seconds, batch)
    queue: Any = multiprocessing.Queue()
    # Each client starts on a different node, so the load is spread evenly over ``urls``.
    rotations = [urls[c % len(urls):] + urls[:c % len(urls)] for c in range(clients)]
    procs = [multiprocessing.Process(target=_client, args=(rotations[c], topics, seconds, c * 1000, queue, batch))
             for c in range(clients)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    return sum(r[0] for r in results) / elapsed, sum(r[1] for r in results)


def _failover(nodes: dict[str, BenchNode], database_url: str) -> float:
    """Kill the owner of a topic, return seconds until a publish to it succeeds; restart the node."""
    live = [Member(n, node_id(n)) for n in nodes]
    topic = "failover-" + str(int(time.time() * 1000))
    victim = owner(topic, live)
    assert victim is not None
    others = [nodes[n].url for n in nodes if n != victim.name]
    session = requests.Session()
    for i in range(20):
        answer = session.post(f"{others[i % 2]}/v1/topics/{topic}/messages", json={"body": i}, timeout=10)
        answer.raise_for_status()
    proc = nodes[victim.name].proc
    assert proc is not None
    killed = time.monotonic()
    proc.kill()
    proc.wait(timeout=10)
    i = 0
    while time.monotonic() - killed < 10 * LEASE_MS / 1000:
        i += 1
        try:
            if session.post(f"{others[i % 2]}/v1/topics/{topic}/messages", json={"body": i},
                            timeout=2).status_code == 201:
                break
        except requests.RequestException:
            pass
        time.sleep(0.02)
    else:
        raise RuntimeError("publishes did not resume after the owner was killed")
    seconds = time.monotonic() - killed
    nodes[victim.name].__exit__(None, None, None)
    nodes[victim.name] = _node(victim.name, database_url).__enter__()
    _wait_live([n.url for n in nodes.values()], len(nodes))
    return seconds


def run(quick: bool, out_dir: Path) -> dict[str, Any]:
    """Measure failover time and the 3-node / 1-node publish throughput ratio; write cluster.json."""
    database_url = _database()
    if database_url is None:
        return {"skipped": "PostgreSQL is not running"}
    seconds = 3.0 if quick else 10.0
    clients = 4 if quick else 6
    trials = 1 if quick else 3
    rss: list[float] = []

    single = _node("toymb-1", database_url).__enter__()
    try:
        one_rate, one_failed = _throughput([single.url], clients, seconds)
        rss.append(peak_rss_mb(single.pid))
    finally:
        single.__exit__(None, None, None)

    nodes: dict[str, BenchNode] = {}
    try:
        for name in NAMES:
            nodes[name] = _node(name, database_url).__enter__()
        urls = [n.url for n in nodes.values()]
        _wait_live(urls, len(NAMES))
        three_rate, three_failed = _throughput(urls, clients, seconds)
        batched_rate, batched_failed = _throughput(urls, clients, seconds, BIG_BATCH)
        three_failed += batched_failed
        failovers = [_failover(nodes, database_url) for _ in range(trials)]
        rss.extend(peak_rss_mb(n.pid) for n in nodes.values())
    finally:
        for node in nodes.values():
            node.__exit__(None, None, None)

    bare = ceilings.postgres_rows_per_s(database_url, 20_000 if quick else 100_000, b"x" * 256)
    results: dict[str, Any] = {
        "bare_postgres_executemany_rows_per_s": bare["executemany"],
        "bare_postgres_copy_rows_per_s": bare["copy"],
        "three_nodes_batched_msgs_per_s": batched_rate,
        "three_nodes_batched_vs_bare_executemany": batched_rate / bare["executemany"],
        "three_nodes_batched_vs_bare_executemany_meets_0.5": batched_rate / bare["executemany"] >= 0.5,
        "three_nodes_vs_bare_executemany": three_rate / bare["executemany"],
        "one_node_msgs_per_s": one_rate,
        "three_nodes_msgs_per_s": three_rate,
        "cluster_vs_one_node_ratio": three_rate / one_rate if one_rate else float("nan"),
        "failed_requests_one_node": one_failed,
        "failed_requests_three_nodes": three_failed,
        "failover_s_mean": sum(failovers) / len(failovers),
        "failover_s_max": max(failovers),
        "failover_in_lease_periods_max": max(failovers) / (LEASE_MS / 1000),
        "node_lease_ms": LEASE_MS,
        "heartbeat_ms": HEARTBEAT_MS,
        "clients": clients,
        "batch": BATCH,
        "big_batch": BIG_BATCH,
        "seconds": seconds,
        "node_peak_rss_mb_max": max(rss),
        "bench_peak_rss_mb": own_peak_rss_mb(),
        "cores": os.cpu_count(),
    }
    report("cluster (PostgreSQL, 3 nodes on one machine)", results)
    write_results(out_dir, "cluster", results, bars={
        "3 nodes / 1 node throughput": results["cluster_vs_one_node_ratio"],
        "3 nodes / bare executemany": results["three_nodes_vs_bare_executemany"],
        "3 nodes, batches of 100 / bare executemany": results["three_nodes_batched_vs_bare_executemany"],
        "failover / lease (max)": results["failover_in_lease_periods_max"],
    })
    return results


if __name__ == "__main__":
    run(quick="--quick" in sys.argv, out_dir=Path("bench/out"))
