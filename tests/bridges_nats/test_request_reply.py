"""Request/reply through the bridge process, against the real nats-server, ActiveMQ and Java JMS programs."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from nats_bridge.codec import BridgeMessage, decode, encode

from .conftest import OPENWIRE_URL, BridgeProcess, NatsThread, start_java_service, unique


def rr_routes(name: str, subject: str, queue: str, *extra: str) -> list[str]:
    """A routes file of one NATS -> JMS request/reply bridge; ``extra``: "key=value" of that bridge."""
    lines = [f"bridge.id={unique('nb')}", f"nats-bridge.{name}.type=request-reply",
             f"nats-bridge.{name}.source.nats.subject={subject}", f"nats-bridge.{name}.dest.jms.queue={queue}"]
    return lines + [f"nats-bridge.{name}.{e}" for e in extra]


@pytest.mark.timeout(180)
def test_a_nats_request_is_answered_by_a_java_jms_service_with_headers_both_ways(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("rr-svc"), unique("rr-svc")
    subject2 = unique("rr-svc-native")
    lines = rr_routes("codec", subject, queue, "timeout.ms=30000") + rr_routes(
        "native", subject2, queue, "headers=nats", "timeout.ms=30000")[1:]
    bridge = bridges(lines)
    service = start_java_service(java_jms, queue, 2)
    try:
        request = BridgeMessage(body=b"hello", headers={"color": "red", "trace.id": "t-7"},
                                correlation_id="client-1", priority=7, type="order")
        reply = nats_client.call(nats_client.nc.request(subject, encode(request), timeout=60))
        answer = decode(reply.data)
        native = nats_client.call(nats_client.nc.request(subject2, b"plain", timeout=60,
                                                         headers={"color": "blue"}))
        out, err = service.communicate(timeout=60)
    finally:
        service.kill()
    assert service.returncode == 0, err
    assert answer.body == b"echo:hello"
    assert answer.correlation_id == "client-1"           # the requester's own, not the bridge's
    assert answer.headers["served_by"] == "java"
    assert answer.headers["echo_color"] == "red" and answer.headers["echo_trace.id"] == "t-7"
    assert native.data == b"echo:plain"
    assert native.headers["served_by"] == "java" and native.headers["echo_color"] == "blue"
    requests = [line.split(" ") for line in out.splitlines() if line.startswith("REQUEST")]
    assert len(requests) == 2
    _, corr, kind, priority, props, body, reply_to = requests[0]
    assert reply_to.startswith("temp-queue://")     # the default: a temporary queue
    assert corr != "client-1" and kind == "order" and priority == "7" and bytes.fromhex(body) == b"hello"
    assert "color=red" in props and "trace_DOT_id=t-7" in props
    assert bridge.status("codec")["counts"]["request_response_count"] == 1


@pytest.mark.timeout(180)
def test_a_java_jms_request_is_answered_by_a_nats_service_with_headers_both_ways(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("rr-rev"), unique("rr-rev")
    seen: list[dict[str, str]] = []

    async def respond(msg: Any) -> None:
        seen.append(dict(msg.headers or {}))
        trace = (msg.headers or {}).get("trace", "")
        await nats_client.nc.publish(msg.reply, b"pong:" + msg.data,
                                     headers={"answered_by": "nats", "trace_back": trace})

    nats_client.call(nats_client.nc.subscribe(subject, cb=respond))
    nats_client.call(nats_client.nc.flush())
    bridge = bridges([f"bridge.id={unique('nb')}", "nats-bridge.back.type=request-reply",
                      f"nats-bridge.back.source.jms.queue={queue}", f"nats-bridge.back.dest.nats.subject={subject}",
                      "nats-bridge.back.headers=nats", "nats-bridge.back.timeout.ms=30000"])
    done = subprocess.run([*java_jms, "request", OPENWIRE_URL, queue, "5"], capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    replies = sorted(line.split(" ") for line in done.stdout.splitlines() if line.startswith("REPLY"))
    assert len(replies) == 5, done.stdout
    for i, (_, corr, props, body) in enumerate(replies):
        assert corr == f"java-{i}"
        assert bytes.fromhex(body) == f"pong:req-{i}".encode()
        assert "answered_by=nats" in props and f"trace_back=t-{i}" in props
    assert sorted(h["trace"] for h in seen) == [f"t-{i}" for i in range(5)]
    assert all(h["BRIDGE_correlation_id"].startswith("java-") for h in seen)
    assert bridge.status("back")["counts"]["request_response_count"] == 5


async def _many(nc: Any, subject: str, count: int) -> list[tuple[bytes, bytes]]:
    async def one(i: int) -> tuple[bytes, bytes]:
        body = f"n-{i}".encode()
        reply = await nc.request(subject, body, timeout=90)
        return body, reply.data

    return await asyncio.gather(*(one(i) for i in range(count)))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_thousand_concurrent_requests_each_get_their_own_reply(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("rr-many"), unique("rr-many")
    bridge = bridges(rr_routes("many", subject, queue, "timeout.ms=90000", "max-in-flight=64", "headers=none"))
    service = start_java_service(java_jms, queue, 1000)
    try:
        pairs = nats_client.call(_many(nats_client.nc, subject, 1000), timeout=240)
        service.communicate(timeout=60)
    finally:
        service.kill()
    assert len(pairs) == 1000
    assert all(reply == b"echo:" + body for body, reply in pairs)
    status = bridge.status("many")
    assert status["counts"]["request_response_count"] == 1000 and status["pending"] == 0
    assert status["counts"]["request_timeout_count"] == 0


@pytest.mark.timeout(120)
def test_requests_to_a_silent_service_time_out_clearly_and_the_pending_gauge_returns_to_zero(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("rr-silent"), unique("rr-silent")
    bridge = bridges(rr_routes("silent", subject, queue, "timeout.ms=1500", "max-in-flight=8"))

    async def ask(count: int) -> list[Any]:
        return await asyncio.gather(*(nats_client.nc.request(subject, b"anyone?", timeout=30) for _ in range(count)))

    replies = nats_client.call(ask(20), timeout=100)
    # 20 requests through 8 slots: every one answered by a timeout error, none left hanging
    assert len(replies) == 20
    for reply in replies:
        assert reply.headers["Nats-Service-Error-Code"] == "504"
        assert "no reply from JMS queue" in reply.headers["Nats-Service-Error"]
    assert bridge.metric("pending_requests", "silent") == 0
    assert bridge.metric("request_timeout_count_total", "silent") == 20
