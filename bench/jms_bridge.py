"""JMS bridge benchmark: egress sink and ingress against bare stomp.py in the same run (ActiveMQ over STOMP).

- bare send: one stomp.py connection, persistent SENDs, a receipt on the last one;
- bare transactional: the same in STOMP transactions of 1000 committed with a receipt (the
  durability the egress sink gives);
- egress sink: ``JmsSink.write_rows`` (routing, conversion, transactions, batch markers);
- ingress: the JMS queues filled above into broker topics (DUPLICATES_OK and ONCE_AND_ONLY_ONCE).

Target: egress >= 0.7 of bare transactional sends. Beside the wall-clock ratios, the egress's
against bare transactional sends on CPU time (this process's CPU seconds per message), which
other processes' load on a shared machine changes much less.

Needs ActiveMQ on 127.0.0.1:61613 (services/activemq.sh start).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.common import BenchNode, own_peak_rss_mb, peak_rss_mb, report, write_results
from bench.peers import drain_stomp_queue
from journal_spark.jms.config import ingress_configs
from journal_spark.jms.egress import JmsSink
from journal_spark.jms.ingress import JmsIngress
from journal_spark.jms.stompclient import StompClient
from journal_spark.routes_file import load_routes

STOMP = "stomp://127.0.0.1:61613"


def _rows(n: int) -> list[dict[str, Any]]:
    body = b"x" * 256
    return [{"id": f"b-{i}", "topic": "bench", "partition": i % 8, "offset": i // 8, "key": f"k{i % 100}",
             "headers": {"n": str(i), "trace.id": f"t-{i}", "jms.kind": "bench"}, "timestamp": 0,
             "content_type": "text/plain", "body": body} for i in range(n)]


def _bare(queue: str, n: int, transactional: bool) -> tuple[float, float]:
    """(messages per second, CPU seconds) of stomp.py sending ``n`` persistent messages."""
    client = StompClient(STOMP).connect()
    body = b"x" * 256
    try:
        t0, cpu = time.perf_counter(), time.process_time()
        if transactional:
            for start in range(0, n, 1000):
                tx = f"tx-{start}"
                client.begin(tx)
                for i in range(start, min(n, start + 1000)):
                    client.send(queue, body, {"persistent": "true", "n": str(i)}, transaction=tx)
                client.commit(tx)
        else:
            for i in range(n):
                client.send(queue, body, {"persistent": "true", "n": str(i)}, receipt=i == n - 1)
        return n / (time.perf_counter() - t0), time.process_time() - cpu
    finally:
        client.close()


def _topic_count(url: str, topic: str) -> int:
    response = requests.get(f"{url}/v1/topics/{topic}", timeout=10)
    if response.status_code != 200:
        return 0
    return sum(int(v) for v in response.json().get("end_offsets", {}).values())


def _ingress(tmp: Path, node_url: str, queue: str, topic: str, qos: str, n: int) -> float:
    path = tmp / f"{topic}.properties"
    path.write_text("\n".join([f"bridge.id=bench-{topic}", f"ingress.i.jms.queue={queue}",
                               f"ingress.i.dest.topic={topic}", f"ingress.i.broker.url={node_url}",
                               f"ingress.i.qos={qos}", "ingress.i.max-batch-size=500",
                               "ingress.i.max-batch-time=200"]) + "\n")
    (config,) = ingress_configs(load_routes(path))
    bridge = JmsIngress(config)
    t0 = time.perf_counter()
    bridge.start()
    try:
        deadline = time.monotonic() + 600
        while bridge.message_count < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return bridge.message_count / (time.perf_counter() - t0)
    finally:
        bridge.stop()


def run(quick: bool, out_dir: Path) -> dict[str, Any]:
    n = 5_000 if quick else 50_000
    run_id = uuid.uuid4().hex[:8]
    bare_q, bare_tx_q, sink_q = (f"/queue/toymb.bench.{run_id}.{x}" for x in ("bare", "baretx", "sink"))
    with tempfile.TemporaryDirectory(prefix="toymb-jms-bench-") as tmp_name:
        tmp = Path(tmp_name)
        bare, _ = _bare(bare_q, n, transactional=False)
        bare_tx, bare_tx_cpu = _bare(bare_tx_q, n, transactional=True)
        # Emptied now, not after the egress: the egress then meets the backlog bare transactional
        # sends met (bare_q's n messages), not twice that (ActiveMQ commits slower as it holds more).
        drain_stomp_queue(bare_tx_q)
        routes = tmp / "routes.properties"
        routes.write_text("\n".join([f"bridge.id=bench-{run_id}", "routes.r.predicate=msg.address==bench",
                                     f"routes.r.dest.jms.queue={sink_q.removeprefix('/queue/')}"]) + "\n")
        rows = _rows(n)
        sink = JmsSink(load_routes(routes))
        try:
            t0, cpu = time.perf_counter(), time.process_time()
            for batch, start in enumerate(range(0, n, 10_000)):
                sink.write_rows(rows[start:start + 10_000], batch)
            egress, egress_cpu = n / (time.perf_counter() - t0), time.process_time() - cpu
        finally:
            sink.close()
        with BenchNode() as node:
            dup_ok = _ingress(tmp, node.url, bare_q.removeprefix("/queue/"), "in-dup", "DUPLICATES_OK", n)
            once = _ingress(tmp, node.url, sink_q.removeprefix("/queue/"), "in-once", "ONCE_AND_ONLY_ONCE", n)
            node_rss = peak_rss_mb(node.pid)
            stored = _topic_count(node.url, "in-dup") + _topic_count(node.url, "in-once")
    results = {
        "messages": n, "body_bytes": 256,
        "bare_send_msgs_per_s": bare, "bare_transactional_msgs_per_s": bare_tx,
        "egress_sink_msgs_per_s": egress, "ingress_duplicates_ok_msgs_per_s": dup_ok,
        "ingress_once_msgs_per_s": once, "ingress_stored": stored,
        "egress_vs_bare_send": egress / bare, "egress_vs_bare_transactional": egress / bare_tx,
        "cpu_us_per_message_bare_transactional": bare_tx_cpu / n * 1e6,
        "cpu_us_per_message_egress": egress_cpu / n * 1e6,
        "egress_vs_bare_transactional_cpu": bare_tx_cpu / egress_cpu, "target_ratio": 0.7,
        "ingress_once_vs_bare_send": once / bare,
        "peak_rss_mb_bench_process": own_peak_rss_mb(), "peak_rss_mb_node": node_rss,
    }
    report("JMS bridge (ActiveMQ over STOMP)", results)
    write_results(out_dir, "jms_bridge", results, bars={
        "egress / bare send": results["egress_vs_bare_send"],
        "egress / bare transactional": results["egress_vs_bare_transactional"],
        "same, on CPU per message": results["egress_vs_bare_transactional_cpu"],
        "ingress ONCE / bare send": results["ingress_once_vs_bare_send"],
    })
    return results


if __name__ == "__main__":
    run(quick=True, out_dir=Path("bench/out"))
