"""NATS bridge benchmark: request/reply through ``toymb bridge nats`` against direct NATS and direct JMS.

In one run, with the same JMS echo service (a STOMP responder in this process) on both JMS paths:

- direct NATS request/reply (nats-py requester and responder): round-trip p50/p99;
- direct JMS request/reply (STOMP request with a temporary reply queue): p50/p99;
- NATS -> bridge -> JMS -> bridge -> NATS: p50/p99, and throughput with 64 requests in flight
  (against direct NATS at 64 in flight);
- the bridge process's peak RSS.

Target (issue 16): "the bridge adds at most 2x a direct JMS request/reply's p50". Both readings are
reported: the bridge's whole p50 against 2x the direct JMS p50, and what it adds to a NATS round trip
(its p50 minus the direct NATS p50) against the same. Needs NATS on 4222 and ActiveMQ (STOMP 61613).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import nats
import requests

from bench.common import free_port, peak_rss_mb, report, write_results
from journal_spark.jms.errors import JmsConnectionError
from journal_spark.jms.stompclient import StompClient

STOMP = "stomp://127.0.0.1:61613"
NATS = "nats://127.0.0.1:4222"
BODY = b"x" * 256


def _echo_jms(queue: str, stop: threading.Event, ready: threading.Event) -> None:
    """The JMS service: answers each request on ``queue`` to its reply-to with its correlation id."""
    client = StompClient(STOMP).connect()
    try:
        client.subscribe(f"/queue/{queue}", "echo", ack="auto", headers={"activemq.prefetchSize": "1000"})
        ready.set()
        while not stop.is_set():
            frame = client.receive(0.2)
            if frame is not None and "reply-to" in frame.headers:
                client.send(frame.headers["reply-to"], frame.body,
                            {"correlation-id": frame.headers.get("correlation-id", ""), "content-length":
                             str(len(frame.body))})
    except JmsConnectionError:
        ready.set()
    finally:
        client.close()


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


def _direct_jms(queue: str, n: int) -> list[float]:
    client = StompClient(STOMP).connect()
    replies = f"/temp-queue/bench-{uuid.uuid4().hex[:8]}"
    out: list[float] = []
    try:
        client.subscribe(replies, "replies", ack="auto")
        for i in range(n):
            t0 = time.perf_counter()
            client.send(f"/queue/{queue}", BODY, {"reply-to": replies, "correlation-id": f"d-{i}",
                                                  "content-length": str(len(BODY))})
            while True:
                frame = client.receive(10.0)
                if frame is None:
                    raise RuntimeError("direct JMS request/reply: no reply within 10 s")
                if frame.headers.get("correlation-id") == f"d-{i}":
                    break
            out.append(time.perf_counter() - t0)
    finally:
        client.close()
    return out


async def _sequential(nc: Any, subject: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await nc.request(subject, BODY, timeout=10)
        out.append(time.perf_counter() - t0)
    return out


async def _in_flight(nc: Any, subject: str, n: int, width: int = 64) -> float:
    slots = asyncio.Semaphore(width)

    async def one() -> None:
        async with slots:
            await nc.request(subject, BODY, timeout=30)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


def _start_bridge(tmp: Path, subject: str, queue: str) -> tuple[subprocess.Popen[bytes], int]:
    routes = tmp / "nats-bridge.properties"
    routes.write_text("\n".join([
        f"bridge.id=bench-{uuid.uuid4().hex[:6]}", "nats-bridge.rr.type=request-reply",
        f"nats-bridge.rr.source.nats.subject={subject}", f"nats-bridge.rr.dest.jms.queue={queue}",
        "nats-bridge.rr.headers=none", "nats-bridge.rr.timeout.ms=30000", "nats-bridge.rr.max-in-flight=256"]) + "\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    proc = subprocess.Popen([sys.executable, "-m", "broker", "bridge", "nats", "--routes", str(routes), "--port",
                             str(port), "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "bridge.log", "ab"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            bridges = requests.get(f"http://127.0.0.1:{port}/bridges", timeout=1).json()["bridges"]
            if all(b["state"] == "STARTED" and b["jms_connected"] for b in bridges):
                return proc, port
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the NATS bridge did not start; see {tmp / 'bridge.log'}")


async def _nats_runs(n: int, bridge_subject: str, direct_subject: str) -> dict[str, Any]:
    nc = await nats.connect(NATS)
    try:
        async def respond(msg: Any) -> None:
            await msg.respond(msg.data)

        await nc.subscribe(direct_subject, cb=respond)
        await nc.flush()
        await _sequential(nc, direct_subject, 50)        # warm-up
        await _sequential(nc, bridge_subject, 50)
        return {"direct": await _sequential(nc, direct_subject, n), "bridge": await _sequential(nc, bridge_subject, n),
                "direct_64": await _in_flight(nc, direct_subject, n * 4),
                "bridge_64": await _in_flight(nc, bridge_subject, n * 4)}
    finally:
        await nc.close()


def run(quick: bool, out_dir: Path) -> dict[str, Any]:
    n = 300 if quick else 2000
    run_id = uuid.uuid4().hex[:8]
    queue, subject, direct = f"toymb.bench.{run_id}.svc", f"toymb.bench.{run_id}.svc", f"toymb.bench.{run_id}.direct"
    stop, ready = threading.Event(), threading.Event()
    service = threading.Thread(target=_echo_jms, args=(queue, stop, ready), daemon=True)
    service.start()
    ready.wait(30)
    with tempfile.TemporaryDirectory(prefix="toymb-nats-bench-") as tmp_name:
        proc, _port = _start_bridge(Path(tmp_name), subject, queue)
        try:
            _direct_jms(queue, 50)                       # warm-up
            jms = _direct_jms(queue, n)
            measured = asyncio.run(_nats_runs(n, subject, direct))
            bridge_rss = peak_rss_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            stop.set()
            service.join(10)
    nats_p50, nats_p99 = _percentiles(measured["direct"])
    jms_p50, jms_p99 = _percentiles(jms)
    bridge_p50, bridge_p99 = _percentiles(measured["bridge"])
    results = {
        "requests": n, "body_bytes": len(BODY),
        "direct_nats_p50_ms": nats_p50, "direct_nats_p99_ms": nats_p99,
        "direct_jms_p50_ms": jms_p50, "direct_jms_p99_ms": jms_p99,
        "bridge_p50_ms": bridge_p50, "bridge_p99_ms": bridge_p99,
        "bridge_p50_vs_direct_jms_p50": bridge_p50 / jms_p50, "bridge_p50_vs_direct_nats_p50": bridge_p50 / nats_p50,
        # What the bridge adds to a NATS requester's round trip, against a direct JMS round trip.
        "bridge_added_p50_ms": bridge_p50 - nats_p50,
        "bridge_added_p50_vs_direct_jms_p50": (bridge_p50 - nats_p50) / jms_p50,
        "direct_nats_req_per_s_64_in_flight": measured["direct_64"],
        "bridge_req_per_s_64_in_flight": measured["bridge_64"],
        "bridge_vs_direct_nats_throughput_64": measured["bridge_64"] / measured["direct_64"],
        "peak_rss_mb_bridge": bridge_rss,
        "target_bridge_p50_at_most_2x_direct_jms": bridge_p50 <= 2 * jms_p50,
        "target_bridge_adds_at_most_2x_direct_jms_p50": bridge_p50 - nats_p50 <= 2 * jms_p50,
    }
    report("NATS bridge (request/reply NATS -> JMS)", results)
    write_results(out_dir, "nats_bridge", results, bars={
        "bridge p50 / direct JMS p50": results["bridge_p50_vs_direct_jms_p50"],
        "bridge p50 / direct NATS p50": results["bridge_p50_vs_direct_nats_p50"],
        "bridge / direct NATS req/s @64": results["bridge_vs_direct_nats_throughput_64"],
    })
    return results


if __name__ == "__main__":
    run(quick=True, out_dir=Path("bench/out"))
