"""Single-message publishing against concurrency: the node and its peers at 1 to 64 publishers.

    python -m bench.concurrency [--quick]      (or: toymb bench --only concurrency)

Each publisher sends one durable message and waits for its acknowledgement before the next: the
node's 201 after commit, ActiveMQ's STOMP receipt, JetStream's PubAck. The node is driven by wrk,
whose latency percentiles (1 to 100) give the node's latency CDF at each concurrency.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import peers
from bench.common import BenchNode, report, write_results

BODY = "x" * 256
LEVELS = (1, 4, 16, 32, 64)

_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = %s
done = function(summary, latency, requests)
  io.write("RATE " .. summary.requests / (summary.duration / 1e6) .. "\\n")
  io.write("ERRORS " .. (summary.errors.status + summary.errors.connect + summary.errors.read
                         + summary.errors.write + summary.errors.timeout) .. "\\n")
  for p = 1, 100 do io.write("P " .. p .. " " .. latency:percentile(p) .. "\\n") end
end
"""


def node_at(url: str, connections: int, seconds: float) -> dict[str, Any]:
    """wrk at ``connections``: requests/s and the latency percentiles 1..100 in milliseconds."""
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(_SCRIPT % json.dumps(json.dumps({"key": "k", "body": BODY, "content_type": "text/plain"})))
    try:
        out = subprocess.run(["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{int(seconds)}s",
                              "-s", str(script), url], capture_output=True, text=True, timeout=seconds + 60).stdout
    finally:
        script.unlink()
    rate, errors, cdf = 0.0, -1, {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["RATE"]:
            rate = float(parts[1])
        elif parts[:1] == ["ERRORS"]:
            errors = int(parts[1])
        elif parts[:1] == ["P"]:
            cdf[int(parts[1])] = float(parts[2]) / 1000.0
    if errors != 0 or not cdf:
        raise RuntimeError(f"wrk failed or saw errors ({errors}):\n{out}")
    return {"req_per_s": rate, "latency_ms_percentiles": cdf}


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    """Node, ActiveMQ (STOMP, a receipt each) and JetStream (sync) at each concurrency level."""
    if not shutil.which("wrk"):
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    seconds = 3.0 if quick else 8.0
    per_level = 2_000 if quick else 8_000
    results: dict[str, Any] = {"levels": list(LEVELS), "seconds": seconds, "message_bytes": 256,
                               "node": {}, "activemq_stomp_receipt_each": {}, "jetstream_sync": {}}
    with BenchNode({"TOYMB_THREADS": str(max(LEVELS))}) as node:
        url = f"{node.url}/v1/topics/bench/messages"
        for level in LEVELS:
            results["node"][level] = node_at(url, level, seconds)
    for level in LEVELS:
        count = max(level, per_level // 4 if level == 1 else per_level)
        results["activemq_stomp_receipt_each"][level] = peers.stomp_send_concurrent(count, 256, level,
                                                                                    receipt_each=True)
        results["jetstream_sync"][level] = peers.nats_publish_concurrent(count, 256, level)
    rows = {f"node @{level}": results["node"][level]["req_per_s"] for level in LEVELS}
    rows.update({f"activemq @{level}": results["activemq_stomp_receipt_each"][level] for level in LEVELS})
    rows.update({f"jetstream @{level}": results["jetstream_sync"][level] for level in LEVELS})
    report("single publishes against concurrency (msg/s)", rows)
    write_results(out_dir, "concurrency", results)
    plot(results, out_dir)
    return results


def plot(results: dict[str, Any], out_dir: Path) -> None:
    """``concurrency.png`` (throughput per level, each system) and ``latency_cdf.png`` (the node)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["levels"]
    fig, ax = plt.subplots(figsize=(7, 4))
    series = {"ToyMB node (201 after commit)": [results["node"][lv]["req_per_s"] for lv in levels],
              "ActiveMQ STOMP (receipt each)": [results["activemq_stomp_receipt_each"][lv] or 0 for lv in levels],
              "NATS JetStream (sync publish)": [results["jetstream_sync"][lv] or 0 for lv in levels]}
    for name, values in series.items():
        ax.plot(levels, values, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent publishers")
    ax.set_ylabel("messages/s")
    ax.set_title("Single durable publishes against concurrency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "concurrency.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for level in levels:
        cdf = results["node"][level]["latency_ms_percentiles"]
        points = sorted((float(ms), int(p) / 100) for p, ms in cdf.items())
        ax.plot([p[0] for p in points], [p[1] for p in points], label=f"{level} publishers")
    ax.set_xscale("log")
    ax.set_xlabel("publish latency, ms (ack after commit)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("ToyMB node: latency CDF")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "latency_cdf.png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv, out_dir=Path(os.environ.get("TOYMB_BENCH_OUT", "bench/out")))
