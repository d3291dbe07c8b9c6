"""Push delivery: end-to-end latency at a steady rate, and push throughput against publish throughput.

    python -m bench.push [--quick]      (or: toymb bench --only push)
    python -m bench.push --latency      (the latency part alone, 8 s, printed as JSON)

- Latency: a publisher process sends 5,000 messages a second (a request of 50 messages every
  10 ms on one kept-alive connection, each message stamped with the time its request began to
  be made: before its messages, their JSON and the HTTP head) to a topic with one push
  subscriber; the receiver records, per message, the time from that stamp to its arrival (the
  last byte of the push that carried it read).
- Throughput: publishers fill a topic as fast as they can (batches of 100, 256-byte bodies), which
  gives the publish rate. Then one group of 4 push subscribers starts at the earliest offset and
  drains the topic; the push rate is messages / drain time. The ratio is push / publish, both
  measured in this run on this node (target: at least 0.8).
- Peak RSS of the node process (VmHWM).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from bench.common import BenchNode, cpu_seconds, peak_rss_mb, report, write_results
from bench.publish import batched_publish

RATE = 5000  # the rate: p99 at most 10 ms at 5,000 msg/s
TICK_S = 0.01
PER_TICK = int(RATE * TICK_S)
BODY = "x" * 256


class CountingReceiver:
    """A push receiver that counts messages and records each one's send-to-arrival latency.

    A message has arrived when its push request's last byte was read: the stamp is taken then,
    before the body is parsed. The request's head is read with a few lines of code, not
    ``http.server``'s email parser, whose tenth of a millisecond per push was the receiver's own
    time, counted in the latency (the broker only sends ``Content-Length`` framed requests).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.requests = 0
        self.latencies_ms: list[float] = []
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            disable_nagle_algorithm = True

            def handle(self) -> None:
                # Keep-alive: the broker pools its connections, so one thread reads request after request.
                while True:
                    length = self._head()
                    if length is None:
                        return
                    self._push(self.rfile.read(length))
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

            def _head(self) -> int | None:
                """The Content-Length of the next request, once its head is read; None at the end."""
                line = self.rfile.readline(65537)
                while line in (b"\r\n", b"\n"):
                    line = self.rfile.readline(65537)
                if not line:
                    return None
                length = 0
                while (line := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                return length

            def _push(self, raw: bytes) -> None:
                now = time.time_ns()
                messages = json.loads(raw)["messages"]
                stamps = [m["body"]["sent_ns"] for m in messages if isinstance(m.get("body"), dict)]
                with receiver.lock:
                    receiver.count += len(messages)
                    receiver.requests += 1
                    receiver.latencies_ms.extend((now - s) / 1e6 for s in stamps)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/push"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _steady_publisher(url: str, seconds: float, done: Any) -> None:
    """Send PER_TICK stamped messages every TICK_S on an absolute schedule (no drift).

    The stamp is taken first; then the request is made (its messages, their JSON, the HTTP head)
    and sent, so all of its making counts in the latency. It goes out on one kept-alive
    connection with http.client: ``requests`` spent about a millisecond of its own per request
    (its hooks, adapters and header merging) after the stamp, which was the load generator's
    time, not the broker's.
    """
    target = urlsplit(url)
    conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    ticks = int(seconds / TICK_S)
    start = time.perf_counter()
    late = 0
    for tick in range(ticks):
        due = start + tick * TICK_S
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            late += 1
        sent_ns = time.time_ns()
        batch = [{"key": f"k{tick}-{i}", "body": {"sent_ns": sent_ns, "pad": BODY}} for i in range(PER_TICK)]
        conn.request("POST", target.path, json.dumps({"messages": batch}).encode(), headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status >= 300:
            raise RuntimeError(f"publish answered {answer.status}")
    conn.close()
    done.put({"ticks": ticks, "late_ticks": late, "elapsed_s": time.perf_counter() - start})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def subscribe(base: str, topic: str, group: str, url: str, start: str = "latest") -> str:
    resp = requests.post(f"{base}/v1/topics/{topic}/groups/{group}/subscribers",
                         json={"mode": "push", "url": url, "start": start}, timeout=10)
    resp.raise_for_status()
    return str(resp.json()["subscriber_id"])


class Heartbeats:
    """Keeps the benchmark's subscribers alive, as a client library would."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.ids: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with requests.Session() as http:
            while not self.stopped.wait(2.0):
                for sid in list(self.ids):
                    try:
                        http.post(f"{self.base}/v1/subscribers/{sid}/heartbeat", timeout=10)
                    except requests.RequestException:
                        pass

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=15)


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def measure_latency(base: str, seconds: float) -> dict[str, Any]:
    receiver = CountingReceiver()
    beats = Heartbeats(base)
    try:
        beats.ids.append(subscribe(base, "bench-latency", "lat", receiver.url))
        done: Any = multiprocessing.Queue()
        proc = multiprocessing.Process(target=_steady_publisher,
                                       args=(f"{base}/v1/topics/bench-latency/messages", seconds, done))
        proc.start()
        info = done.get(timeout=seconds + 120)
        proc.join()
        sent = info["ticks"] * PER_TICK
        wait_for(lambda: receiver.count >= sent, timeout=60)
        with receiver.lock:
            lat = list(receiver.latencies_ms)
        return {"latency_messages": sent, "latency_delivered": receiver.count,
                "latency_p50_ms": percentile(lat, 0.50), "latency_p99_ms": percentile(lat, 0.99),
                "latency_max_ms": max(lat) if lat else float("nan"),
                "latency_rate_msg_s": sent / info["elapsed_s"], "latency_late_ticks": info["late_ticks"]}
    finally:
        beats.stop()
        receiver.close()


def measure_throughput(base: str, seconds: float, node_pid: int) -> dict[str, Any]:
    topic = "bench-drain"
    requests.put(f"{base}/v1/topics/{topic}", json={"partitions": 100}, timeout=10)
    publish_rate = batched_publish(f"{base}/v1/topics/{topic}/messages", clients=2, seconds=seconds)
    total = sum(requests.get(f"{base}/v1/topics/{topic}", timeout=10).json()["end_offsets"].values())
    receivers = [CountingReceiver() for _ in range(4)]
    beats = Heartbeats(base)
    try:
        cpu_before = cpu_seconds(node_pid)
        started = time.perf_counter()
        for r in receivers:
            beats.ids.append(subscribe(base, topic, "four", r.url, start="earliest"))
        drained = wait_for(lambda: sum(r.count for r in receivers) >= total, timeout=600)
        elapsed = time.perf_counter() - started
        node_cpu = cpu_seconds(node_pid) - cpu_before
        delivered = sum(r.count for r in receivers)
        push_rate = delivered / elapsed
        return {"publish_msg_s": publish_rate, "push_msg_s": push_rate,
                "push_over_publish": push_rate / publish_rate,
                "drain_messages": total, "drain_delivered": delivered, "drain_complete": drained,
                "drain_s": elapsed, "per_subscriber": [r.count for r in receivers],
                # A shared machine's load skews the rates, not these two.
                "drain_node_cpu_us_per_message": node_cpu / max(1, delivered) * 1e6,
                "drain_messages_per_push": delivered / max(1, sum(r.requests for r in receivers))}
    finally:
        beats.stop()
        for r in receivers:
            r.close()


def run(quick: bool = False, out_dir: Path = Path("bench/out")) -> dict[str, Any]:
    """Measure push latency and throughput on one node; print and write ``push.json``/``push.png``."""
    latency_s = 4.0 if quick else 20.0
    fill_s = 3.0 if quick else 10.0
    with BenchNode() as node:
        results: dict[str, Any] = {"quick": quick, "rate_msg_s": RATE}
        results.update(measure_latency(node.url, latency_s))
        results.update(measure_throughput(node.url, fill_s, node.pid))
        results["node_peak_rss_mb"] = peak_rss_mb(node.pid)
    report("push delivery", {
        f"end-to-end latency p50 at {RATE} msg/s (ms)": results["latency_p50_ms"],
        f"end-to-end latency p99 at {RATE} msg/s (ms)": results["latency_p99_ms"],
        "p99 meets 10 ms": results["latency_p99_ms"] <= 10.0,
        "publish throughput, batches of 100 (msg/s)": results["publish_msg_s"],
        "push throughput, 1 group x 4 subscribers (msg/s)": results["push_msg_s"],
        "push / publish (target >= 0.8)": results["push_over_publish"],
        "push / publish meets 0.8": results["push_over_publish"] >= 0.8,
        "drain: node CPU per pushed message (us)": results["drain_node_cpu_us_per_message"],
        "drain: messages per push request": results["drain_messages_per_push"],
        "node peak RSS (MiB)": results["node_peak_rss_mb"],
    })
    write_results(out_dir, "push", results, bars={"push / publish": results["push_over_publish"]})
    return results


if __name__ == "__main__":
    if "--latency" in sys.argv:  # the latency part alone, 8 s, for alternating A/B runs
        with BenchNode() as bench_node:
            print(json.dumps(measure_latency(bench_node.url, 8.0)))
    else:
        run(quick="--quick" in sys.argv, out_dir=Path("bench/out"))
