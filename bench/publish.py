"""Publish throughput against the raw ceiling (bare SQLite inserts), the HTTP ceiling and peers.

    python -m bench.publish [--quick]      (or: toymb bench --only publish)
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench import peers
from bench.common import BenchNode, free_port, own_peak_rss_mb, peak_rss_mb, report, write_results
from broker.store import schema

BODY = "x" * 256
BATCH = 100


def raw_sqlite_ceiling(rows: int) -> float:
    """Bare ``executemany`` of the same rows into the same table, WAL, full sync, 1,000 rows a commit."""
    folder = Path(tempfile.mkdtemp(prefix="toymb-raw-"))
    try:
        from sqlalchemy import create_engine

        engine = create_engine(f"sqlite:///{folder / 'raw.db'}")
        schema.metadata.create_all(engine)
        engine.dispose()
        conn = sqlite3.connect(folder / "raw.db")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        now = int(time.time() * 1000)
        data = [("raw", i % 100, i // 100, uuid.uuid4().hex, f"k{i}", "{}", "text/plain", BODY.encode(), now)
                for i in range(rows)]
        started = time.perf_counter()
        for start in range(0, rows, 1000):
            conn.executemany('INSERT INTO toymb_messages (topic, partition, "offset", id, key, headers, '
                             "content_type, body, timestamp) VALUES (?,?,?,?,?,?,?,?,?)", data[start:start + 1000])
            conn.commit()
        elapsed = time.perf_counter() - started
        conn.close()
        return rows / elapsed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _batch_client(url: str, seconds: float, result: Any) -> None:
    session = requests.Session()
    payload = json.dumps({"messages": [{"key": f"k{i}", "body": BODY, "content_type": "text/plain"}
                                       for i in range(BATCH)]})
    sent = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        r = session.post(url, data=payload, headers={"Content-Type": "application/json"}, timeout=30)
        if r.status_code == 201:
            sent += BATCH
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


def echo_ceiling(body: str, connections: int, seconds: float, threads: int) -> float:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.echo_server", str(port), str(threads)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(f"http://127.0.0.1:{port}/ready", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        return concurrent_singles(f"http://127.0.0.1:{port}/echo", body, connections, seconds)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    seconds = 3.0 if quick else 10.0
    peer_count = 5_000 if quick else 50_000
    results: dict[str, Any] = {"quick": quick, "message_bytes": 256}
    results["raw_sqlite_rows_per_s"] = raw_sqlite_ceiling(50_000 if quick else 300_000)
    single_body = json.dumps({"key": "k", "body": BODY, "content_type": "text/plain"})
    threads = 32
    with BenchNode({"TOYMB_THREADS": str(threads)}) as node:
        url = f"{node.url}/v1/topics/bench/messages"
        results["batched_publish_msgs_per_s"] = batched_publish(url, clients=4, seconds=seconds)
        results["single_publish_req_per_s"] = concurrent_singles(url, single_body, 32, seconds)
        results["node_peak_rss_mb"] = peak_rss_mb(node.pid)
        stored = sum(requests.get(f"{node.url}/v1/topics/bench", timeout=10).json()["end_offsets"].values())
        results["messages_stored"] = stored
    results["echo_req_per_s"] = echo_ceiling(single_body, 32, seconds, threads)
    results["load_generator"] = "wrk" if shutil.which("wrk") else "python"
    results["ratio_batched_vs_raw_sqlite"] = results["batched_publish_msgs_per_s"] / results["raw_sqlite_rows_per_s"]
    results["ratio_single_vs_echo"] = results["single_publish_req_per_s"] / results["echo_req_per_s"]
    bars = {"batched / raw SQLite": results["ratio_batched_vs_raw_sqlite"],
            "single / echo": results["ratio_single_vs_echo"]}
    for name, fn in (("kafka", peers.kafka_produce), ("activemq_stomp", peers.stomp_send),
                     ("nats_jetstream", peers.nats_publish)):
        try:
            rate = fn(peer_count, 256)
        except Exception as exc:  # noqa: BLE001 - a broken peer is reported, not fatal
            print(f"peer {name} failed: {exc}")
            rate = None
        results[f"peer_{name}_msgs_per_s"] = rate
        if rate:
            results[f"ratio_batched_vs_{name}"] = results["batched_publish_msgs_per_s"] / rate
            bars[f"batched / {name}"] = results[f"ratio_batched_vs_{name}"]
    results["bench_process_peak_rss_mb"] = own_peak_rss_mb()
    report("publish", results)
    write_results(out_dir, "publish", results, bars)
    return results


if __name__ == "__main__":
    run(quick="--quick" in sys.argv, out_dir=Path(os.environ.get("TOYMB_BENCH_OUT", "bench/out")))
