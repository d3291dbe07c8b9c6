"""What a user of the bridge notices: management, late replies, corrupt frames, the in-flight cap, reply routes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest
import requests

from journal_spark.jms.stompclient import StompClient
from nats_bridge.codec import decode
from tests.support import wait_until

from .conftest import BridgeProcess, NatsThread, start_java_service, unique
from .test_request_reply import rr_routes


@pytest.mark.timeout(120)
def test_pause_resume_and_status_over_http_and_the_cli(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("mg"), unique("mg")
    bridge = bridges(rr_routes("mg", subject, queue, "timeout.ms=20000"))
    status = bridge.status("mg")
    assert status["state"] == "STARTED" and status["parameters"]["dest"] == queue
    assert status["bridge_id"].startswith("toymb.test.nb.")
    paused = requests.post(f"{bridge.url}/bridges/mg/pause", timeout=10).json()
    assert paused["state"] == "PAUSED"
    assert 'bridge_state{bridge="mg",state="PAUSED"} 1.0' in requests.get(f"{bridge.url}/metrics", timeout=10).text
    # paused: nobody takes the subject, so NATS answers "no responders" at once
    with pytest.raises(nats.errors.NoRespondersError):
        nats_client.call(nats_client.nc.request(subject, b"x", timeout=10))
    cli = subprocess.run([sys.executable, "-m", "broker", "bridge", "resume", "mg", "--url", bridge.url],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and "STARTED" in cli.stdout, cli.stderr
    service = start_java_service(java_jms, queue, 1)
    try:
        reply = nats_client.call(nats_client.nc.request(subject, b"back", timeout=30))
    finally:
        service.kill()
    assert decode(reply.data).body == b"echo:back"
    shown = subprocess.run([sys.executable, "-m", "broker", "bridge", "status", "mg", "--url", bridge.url],
                           capture_output=True, text=True, timeout=60)
    assert '"request_response_count": 1' in shown.stdout
    assert requests.get(f"{bridge.url}/bridges/nope", timeout=10).status_code == 404
    text = requests.get(f"{bridge.url}/metrics", timeout=10).text
    for name in ("request_count_total", "request_response_count_total", "request_response_missing_count_total",
                 "received_count_total", "publish_count_total", "request_errors_total", "publish_errors_total",
                 "request_latency_seconds_bucket", "pending_requests", "decode_errors_total"):
        assert f'{name}{{bridge="mg"' in text, name


@pytest.mark.timeout(120)
def test_a_late_reply_is_counted_and_dropped(stomp_url: str, nats_client: NatsThread,
                                             bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("late"), unique("late")
    bridge = bridges(rr_routes("late", subject, queue, "timeout.ms=1000"))
    service = StompClient(stomp_url).connect()
    try:
        service.subscribe(f"/queue/{queue}", "svc", ack="auto")
        inbox = nats_client.nc.new_inbox()
        replies: list[Any] = []

        async def collect(msg: Any) -> None:
            replies.append(msg)

        nats_client.call(nats_client.nc.subscribe(inbox, cb=collect))
        nats_client.call(nats_client.nc.publish(subject, b"slow please", reply=inbox))
        frame = None
        deadline = time.monotonic() + 30
        while frame is None and time.monotonic() < deadline:
            frame = service.receive(0.5)
        assert frame is not None, "the request never reached JMS"
        # answer only after the requester has its timeout error
        deadline = time.monotonic() + 30
        while not replies and time.monotonic() < deadline:
            time.sleep(0.05)
        assert replies and replies[0].headers["Nats-Service-Error-Code"] == "504"
        service.send(frame.headers["reply-to"], b"too late", {"correlation-id": frame.headers["correlation-id"]})
        deadline = time.monotonic() + 30
        while bridge.metric("late_reply_count_total", "late") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        service.close()
    assert bridge.metric("late_reply_count_total", "late") == 1
    assert bridge.metric("request_response_missing_count_total", "late") == 1
    assert bridge.metric("request_response_count_total", "late") == 0
    time.sleep(0.5)
    assert len(replies) == 1          # the late reply never reached the requester


@pytest.mark.timeout(60)
def test_a_corrupt_frame_gets_a_clear_error_and_is_counted_by_reason(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("bad"), unique("bad")
    bridge = bridges(rr_routes("bad", subject, queue, "timeout.ms=5000"))
    corrupt = bytes.fromhex("abcd0100 01 0161 92 05 6869")      # a 5-byte string with 2 bytes left
    reply = nats_client.call(nats_client.nc.request(subject, corrupt, timeout=30))
    assert reply.headers["Nats-Service-Error-Code"] == "400"
    assert "corrupt header-protocol frame" in reply.headers["Nats-Service-Error"]
    text = requests.get(f"{bridge.url}/metrics", timeout=10).text
    assert 'decode_errors_total{bridge="bad",reason="truncated"} 1.0' in text
    assert bridge.metric("request_count_total", "bad") == 0    # nothing reached JMS


@pytest.mark.timeout(120)
def test_the_in_flight_cap_holds_requests_back_until_replies_free_slots(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue = unique("cap"), unique("cap")
    bridge = bridges(rr_routes("cap", subject, queue, "timeout.ms=60000", "max-in-flight=4", "headers=none"))

    async def ask() -> list[Any]:
        return await asyncio.gather(*(nats_client.nc.request(subject, f"c-{i}".encode(), timeout=90)
                                      for i in range(20)))

    future = asyncio.run_coroutine_threadsafe(ask(), nats_client.loop)
    deadline = time.monotonic() + 30
    while bridge.metric("request_count_total", "cap") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)   # had the cap leaked, more requests would have gone out meanwhile
    assert bridge.metric("request_count_total", "cap") == 4
    assert bridge.metric("pending_requests", "cap") == 4
    service = start_java_service(java_jms, queue, 20)
    try:
        replies = future.result(timeout=90)
    finally:
        service.kill()
    assert sorted(r.data for r in replies) == sorted(f"echo:c-{i}".encode() for i in range(20))
    assert bridge.metric("pending_requests", "cap") == 0


@pytest.mark.timeout(120)
def test_replies_can_come_on_a_configured_queue_and_subject(
        stomp_url: str, nats_client: NatsThread, java_jms: list[str], bridges: Callable[..., BridgeProcess]) -> None:
    subject, queue, replies = unique("rq"), unique("rq"), unique("rq-replies")
    back_subject, back_queue, prefix = unique("rs"), unique("rs"), unique("rs-replies")
    seen_reply_subjects: list[str] = []

    async def respond(msg: Any) -> None:
        seen_reply_subjects.append(msg.reply)
        await nats_client.nc.publish(msg.reply, b"ok:" + msg.data)

    nats_client.call(nats_client.nc.subscribe(back_subject, cb=respond))
    nats_client.call(nats_client.nc.flush())
    bridge = bridges(rr_routes("rq", subject, queue, "timeout.ms=30000", f"reply.jms.queue={replies}") + [
        "nats-bridge.rs.type=request-reply", f"nats-bridge.rs.source.jms.queue={back_queue}",
        f"nats-bridge.rs.dest.nats.subject={back_subject}", f"nats-bridge.rs.reply.nats.prefix={prefix}",
        "nats-bridge.rs.headers=none"])
    service = start_java_service(java_jms, queue, 1)
    try:
        reply = nats_client.call(nats_client.nc.request(subject, b"hi", timeout=30))
        out, _ = service.communicate(timeout=30)
    finally:
        service.kill()
    assert decode(reply.data).body == b"echo:hi"
    assert out.split("\n")[0].split(" ")[-1] == f"queue://{replies}"      # JMSReplyTo was the configured queue
    client = StompClient(stomp_url).connect()
    try:
        client.subscribe("/temp-queue/answers", "answers", ack="auto")
        client.send(f"/queue/{back_queue}", b"ping", {"reply-to": "/temp-queue/answers", "correlation-id": "k-1"})
        frame = None
        deadline = time.monotonic() + 30
        while frame is None and time.monotonic() < deadline:
            frame = client.receive(0.5)
    finally:
        client.close()
    assert frame is not None and frame.body == b"ok:ping" and frame.headers["correlation-id"] == "k-1"
    assert seen_reply_subjects and seen_reply_subjects[0].startswith(prefix + ".")
    # The bridge counts a reply once ActiveMQ has receipted it, which can come after the requester
    # already has it: wait for the count to move, then it must be exactly this one reply.
    wait_until(lambda: bridge.status("rs")["counts"]["request_response_count"] > 0, timeout=10,
               what="the reply counted")
    assert bridge.status("rs")["counts"]["request_response_count"] == 1
