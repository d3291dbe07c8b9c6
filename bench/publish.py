"""Publish throughput against the raw ceiling (bare SQLite inserts), the HTTP ceiling and peers.

    python -m bench.publish [--quick]      (or: toymb bench --only publish)
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from bench import ceilings, peers
from bench.common import BenchNode, cpu_seconds, own_peak_rss_mb, peak_rss_mb, report, rss_mb, write_results

BODY = "x" * 256
BATCH = 100
BATCHED_CLIENTS = 4
SINGLE_CONNECTIONS = 32


def _batch_client(url: str, seconds: float, result: Any) -> None:
    """One connection posting batches back to back, counting the messages answered 201.

    On http.client, not requests: requests spent about 1.2 ms of CPU on each 100-message post
    (12 µs a message, two thirds of the node's own) on the node's cores, http.client about 0.35 ms.
    """
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    payload = json.dumps({"messages": [{"key": f"k{i}", "body": BODY, "content_type": "text/plain"}
                                       for i in range(BATCH)]}).encode()
    headers = {"Content-Type": "application/json"}
    sent = 0
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            conn.request("POST", parts.path, body=payload, headers=headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status == 201:
                sent += BATCH
    finally:
        conn.close()
    result.put(sent)


def _rate_of_processes(target: Any, args: tuple[Any, ...], processes: int, seconds: float) -> float:
    """Run ``target(*args, queue)`` in ``processes`` client processes; their summed count per second."""
    queue: Any = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=target, args=(*args, queue)) for _ in range(processes)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    total = sum(int(queue.get(timeout=seconds + 120)) for _ in procs)
    for p in procs:
        p.join()
    return total / (time.perf_counter() - started)


def batched_publish(url: str, clients: int, seconds: float) -> float:
    """Messages/s of ``clients`` connections each sending BATCH messages a request, one at a time.

    wrk when installed: a Python client spends more CPU on a request than the node, on the
    same cores, and would measure itself as much as the node.
    """
    if shutil.which("wrk"):
        payload = json.dumps({"messages": [{"key": f"k{i}", "body": BODY, "content_type": "text/plain"}
                                           for i in range(BATCH)]})
        return _wrk(url, payload, clients, seconds) * BATCH
    return _rate_of_processes(_batch_client, (url, seconds), clients, seconds)


def _wrk(url: str, body: str, connections: int, seconds: float) -> float:
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f"wrk.body = {json.dumps(body)}\n")
    try:
        out = subprocess.run(["wrk", "-t", "2", "-c", str(connections), "-d", f"{int(seconds)}s", "-s", str(script),
                              url], capture_output=True, text=True, timeout=seconds + 60).stdout
    finally:
        script.unlink()
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"some requests failed, so the rate would count failures:\n{out}")
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise RuntimeError(f"wrk printed no rate:\n{out}")


def _single_client(url: str, body: str, threads: int, seconds: float, result: Any) -> None:
    import threading

    counts = [0] * threads

    def loop(n: int) -> None:
        session = requests.Session()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if session.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=30).ok:
                counts[n] += 1

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    result.put(sum(counts))


def concurrent_singles(url: str, body: str, connections: int, seconds: float) -> float:
    """Requests/s of ``connections`` concurrent clients: wrk when installed, else client processes."""
    if shutil.which("wrk"):
        return _wrk(url, body, connections, seconds)
    return _rate_of_processes(_single_client, (url, body, connections // 4, seconds), 4, seconds)


def rss_over_a_million(url: str, node_pid: int, rate: float) -> dict[str, Any]:
    """Publish about 1,000,000 messages in batches and sample the node's RSS every half second."""
    import threading

    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            samples.append(rss_mb(node_pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before = _stored(url)
    try:
        batched_publish(url, BATCHED_CLIENTS, max(5.0, 1_000_000 / rate * 1.1))
    finally:
        done.set()
        sampler.join()
    tenth = max(1, len(samples) // 10)
    return {"million_messages_published": _stored(url) - before, "million_rss_mb_first_tenth": max(samples[:tenth]),
            "million_rss_mb_last_tenth": max(samples[-tenth:]), "million_rss_mb_peak": max(samples)}


def _node_samples(node: BenchNode) -> dict[str, float]:
    """The node's metrics now: each sample's value by its name and labels, as /metrics writes them."""
    samples = {}
    for line in requests.get(f"{node.url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _writer_counters(node: BenchNode) -> tuple[float, float, float]:
    """The node's CPU seconds so far, and its group commits and the rows they wrote (its metrics)."""
    cpu = cpu_seconds(node.pid)
    samples = _node_samples(node)
    return cpu, samples.get("toymb_group_commit_rows_count", 0.0), samples.get("toymb_group_commit_rows_sum", 0.0)


def measured_batched_publish(node: BenchNode, url: str, seconds: float) -> dict[str, float]:
    """:func:`batched_publish` on ``node``, with the node's CPU per message (the figure a shared,
    loaded machine disturbs least) and the rows its writer put in a commit."""
    cpu, commits, rows = _writer_counters(node)
    rate = batched_publish(url, clients=BATCHED_CLIENTS, seconds=seconds)
    cpu_after, commits_after, rows_after = _writer_counters(node)
    written = max(rows_after - rows, 1.0)
    return {"batched_publish_msgs_per_s": rate, "batched_node_cpu_us_per_msg": (cpu_after - cpu) / written * 1e6,
            "batched_rows_per_commit": written / max(commits_after - commits, 1.0)}


def _publish_requests(node: BenchNode) -> float:
    """The publish requests the node answered so far (its ``toymb_publish_requests_total`` metric)."""
    return _node_samples(node).get('toymb_publish_requests_total{outcome="ok"}', 0.0)


def measured_single_publish(node: BenchNode, url: str, body: str, seconds: float) -> dict[str, float]:
    """:func:`concurrent_singles` on ``node``, with the node's CPU per publish (/proc): the figure
    a shared, loaded machine disturbs least."""
    cpu, answered = cpu_seconds(node.pid), _publish_requests(node)
    rate = concurrent_singles(url, body, SINGLE_CONNECTIONS, seconds)
    used, count = cpu_seconds(node.pid) - cpu, _publish_requests(node) - answered
    return {"single_publish_req_per_s": rate, "single_node_cpu_us_per_req": used / max(count, 1.0) * 1e6}


def _stored(url: str) -> int:
    topic_url = url.rsplit("/messages", 1)[0]
    return int(sum(requests.get(topic_url, timeout=10).json()["end_offsets"].values()))


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    """Node against its ceilings and its peers, each at the node's own concurrency, in one run."""
    seconds = 3.0 if quick else 10.0
    peer_count = 5_000 if quick else 30_000
    results: dict[str, Any] = {"quick": quick, "message_bytes": 256, "batch": BATCH,
                               "batched_clients": BATCHED_CLIENTS, "single_connections": SINGLE_CONNECTIONS}
    results["raw_sqlite_rows_per_s"] = ceilings.sqlite_rows_per_s(50_000 if quick else 300_000, BODY.encode())
    results["raw_sqlite_engine"] = ceilings.SQLITE_ENGINE
    single_body = json.dumps({"key": "k", "body": BODY, "content_type": "text/plain"})
    with BenchNode({"TOYMB_THREADS": str(SINGLE_CONNECTIONS)}) as node:
        url = f"{node.url}/v1/topics/bench/messages"
        results.update(measured_batched_publish(node, url, seconds))
        results.update(measured_single_publish(node, url, single_body, seconds))
        if not quick:
            results.update(rss_over_a_million(url, node.pid, results["batched_publish_msgs_per_s"]))
        results["node_peak_rss_mb"] = peak_rss_mb(node.pid)
        stored = sum(requests.get(f"{node.url}/v1/topics/bench", timeout=10).json()["end_offsets"].values())
        results["messages_stored"] = stored
    # The same bare engine, committing as many rows at a time as the node's writer did: with 4
    # clients of 100 messages, a commit holds what arrived during the one before (about 200), so
    # each commit rewrites a page of the key's index per partition for fewer rows. Not a ceiling
    # (the node's commit size is its own design); it tells how much of the gap to the ceiling the
    # engine itself shows at that size.
    results["raw_sqlite_rows_per_s_at_node_commit_rows"] = ceilings.sqlite_rows_per_s(
        50_000 if quick else 300_000, BODY.encode(), commit_rows=max(1, round(results["batched_rows_per_commit"])))
    with ceilings.BareWsgiServer(SINGLE_CONNECTIONS) as bare:
        results["bare_wsgi_req_per_s"] = concurrent_singles(f"{bare.url}/publish", single_body,
                                                            SINGLE_CONNECTIONS, seconds)
    results["load_generator"] = "wrk" if shutil.which("wrk") else "python"
    peer_runs: dict[str, Any] = {
        "kafka_producer": lambda: peers.kafka_produce(peer_count, 256),
        "activemq_stomp_persistent": lambda: peers.stomp_send_concurrent(
            peer_count, 256, BATCHED_CLIENTS, receipt_each=False),
        "activemq_stomp_receipt_each": lambda: peers.stomp_send_concurrent(
            peer_count // 4, 256, SINGLE_CONNECTIONS, receipt_each=True),
        "jetstream_async": lambda: peers.nats_publish_concurrent(peer_count, 256, BATCHED_CLIENTS, in_flight=BATCH),
        "jetstream_sync": lambda: peers.nats_publish_concurrent(peer_count // 4, 256, SINGLE_CONNECTIONS),
    }
    for name, measure in peer_runs.items():
        try:
            results[f"peer_{name}_msgs_per_s"] = measure()
        except Exception as exc:  # noqa: BLE001 - a broken peer is reported, not fatal
            print(f"peer {name} failed: {exc}")
            results[f"peer_{name}_msgs_per_s"] = None
    batched, single = results["batched_publish_msgs_per_s"], results["single_publish_req_per_s"]
    ratios = {
        # (name, numerator, denominator key, the floor)
        "batched / raw SQLite": (batched, "raw_sqlite_rows_per_s", 0.5),
        "batched / raw SQLite at the node's rows per commit": (batched, "raw_sqlite_rows_per_s_at_node_commit_rows",
                                                               None),
        "batched / ActiveMQ STOMP persistent": (batched, "peer_activemq_stomp_persistent_msgs_per_s", 2.0),
        "batched / JetStream async": (batched, "peer_jetstream_async_msgs_per_s", 1.0),
        "batched / Kafka producer": (batched, "peer_kafka_producer_msgs_per_s", None),
        "single / ActiveMQ STOMP receipt each": (single, "peer_activemq_stomp_receipt_each_msgs_per_s", 2.0),
        "single / JetStream sync": (single, "peer_jetstream_sync_msgs_per_s", 0.5),
        "single / bare WSGI, same server": (single, "bare_wsgi_req_per_s", 0.3),
    }
    bars: dict[str, float] = {}
    for name, (value, key, floor) in ratios.items():
        if results.get(key):
            bars[name] = value / results[key]
            results[f"ratio {name}"] = bars[name]
            if floor is not None:
                results[f"ratio {name} meets {floor}"] = bars[name] >= floor
    results["bench_process_peak_rss_mb"] = own_peak_rss_mb()
    report("publish", results)
    write_results(out_dir, "publish", results, bars)
    return results


if __name__ == "__main__":
    run(quick="--quick" in sys.argv, out_dir=Path(os.environ.get("TOYMB_BENCH_OUT", "bench/out")))
