"""Forwarding both ways, counted, with the bridge SIGKILLed mid-stream: nothing is lost."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from nats_bridge.codec import decode
from tests.bridges_jms.conftest import drain, send_all
from tests.support import wait_until

from .conftest import BridgeProcess, NatsThread, unique

COUNT = 3000


def _forward(name: str, *lines: str) -> list[str]:
    return [f"bridge.id={unique('nb')}", f"nats-bridge.{name}.type=forward",
            *(f"nats-bridge.{name}.{line}" for line in lines)]


def _kill_when(bridge: BridgeProcess, progress: Callable[[], int], at: int) -> None:
    wait_until(lambda: progress() >= at, timeout=120, what=f"{at} messages through before the kill\n"
                                                             f"{bridge.log_tail()}")
    bridge.kill()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("jetstream", [False, True], ids=["core", "jetstream"])
def test_jms_to_nats_loses_nothing_when_the_bridge_is_killed(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess], jetstream: bool) -> None:
    queue, subject = unique("fw-out"), unique("fw-out")
    got: Counter[bytes] = Counter()
    js = nats_client.nc.jetstream()
    stream = unique("FWOUT").replace(".", "_")
    if jetstream:
        nats_client.call(js.add_stream(name=stream, subjects=[subject]))
    else:
        async def collect(msg: Any) -> None:
            got[msg.data] += 1

        nats_client.call(nats_client.nc.subscribe(subject, cb=collect))
        nats_client.call(nats_client.nc.flush())
    try:
        lines = _forward("out", f"source.jms.queue={queue}", f"dest.nats.subject={subject}", "headers=nats",
                         *(["dest.jetstream=true"] if jetstream else []))
        first = bridges(lines)
        send_all(f"/queue/{queue}", [(f"m-{i}".encode(), {"n": str(i)}) for i in range(COUNT)])

        def through() -> int:
            if jetstream:
                return int(nats_client.call(js.stream_info(stream)).state.messages)
            return len(got)

        _kill_when(first, through, COUNT // 5)
        bridges(lines)   # a new process takes the unacknowledged messages again
        wait_until(lambda: through() >= COUNT, timeout=180, what=f"all {COUNT} forwarded")
        time.sleep(1.0)   # anything still coming would be a duplicate, which the assertions below catch
        if jetstream:
            info = nats_client.call(js.stream_info(stream))
            assert info.state.messages == COUNT     # exactly once: Nats-Msg-Id dedup within the window
            stored = [m.data for m in nats_client.stream_messages(stream, subject, COUNT)]
            assert set(stored) == {f"m-{i}".encode() for i in range(COUNT)}
        else:
            assert set(got) == {f"m-{i}".encode() for i in range(COUNT)}   # at least once: no loss
    finally:
        if jetstream:
            nats_client.call(js.delete_stream(stream))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jetstream_to_jms_loses_nothing_when_the_bridge_is_killed(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess]) -> None:
    queue, subject = unique("fw-in"), unique("fw-in")
    stream = unique("FWIN").replace(".", "_")
    js = nats_client.nc.jetstream()
    nats_client.call(js.add_stream(name=stream, subjects=[subject]))
    try:
        async def publish() -> None:
            for i in range(COUNT):
                await js.publish(subject, f"m-{i}".encode(), headers={"n": str(i)})

        nats_client.call(publish(), timeout=240)
        lines = _forward("in", f"source.nats.subject={subject}", "source.jetstream.durable=fwin",
                         f"dest.jms.queue={queue}", "headers=nats")
        first = bridges(lines)
        _kill_when(first, lambda: int(first.status("in")["counts"]["publish_count"]), COUNT // 5)
        bridges(lines)
        frames = drain(f"/queue/{queue}", COUNT, idle=3.0, timeout=240)
    finally:
        nats_client.call(js.delete_stream(stream))
    bodies = Counter(f.body for f in frames)
    assert set(bodies) == {f"m-{i}".encode() for i in range(COUNT)}
    assert all(f.headers["n"] == f.body.decode()[2:] for f in frames)   # headers came along


@pytest.mark.timeout(120)
def test_core_nats_to_jms_forwards_with_a_queue_group_shared_by_two_bridges(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess]) -> None:
    queue, subject = unique("fw-group"), unique("fw-group")
    lines = _forward("grp", f"source.nats.subject={subject}", f"dest.jms.queue={queue}", "queue-group=workers")
    one, two = bridges(lines), bridges(lines)

    async def publish() -> None:
        for i in range(400):
            await nats_client.nc.publish(subject, f"g-{i}".encode())
        await nats_client.nc.flush()

    nats_client.call(publish())
    frames = drain(f"/queue/{queue}", 400, idle=2.0, timeout=90)
    assert sorted(f.body for f in frames) == sorted(f"g-{i}".encode() for i in range(400))   # each once
    shares = [one.status("grp")["counts"]["publish_count"], two.status("grp")["counts"]["publish_count"]]
    assert sum(shares) == 400 and min(shares) > 0, shares


@pytest.mark.timeout(120)
def test_a_message_version_1_0_cannot_carry_is_skipped_and_counted_and_the_rest_flow(
        stomp_url: str, nats_client: NatsThread, bridges: Callable[..., BridgeProcess]) -> None:
    queue, subject = unique("fw-bad"), unique("fw-bad")
    got: list[Any] = []

    async def collect(msg: Any) -> None:
        got.append(msg)

    nats_client.call(nats_client.nc.subscribe(subject, cb=collect))
    nats_client.call(nats_client.nc.flush())
    bridge = bridges(_forward("bad", f"source.jms.queue={queue}", f"dest.nats.subject={subject}", "headers=codec"))
    # an empty string property: the header protocol 1.0 has no way to carry it
    send_all(f"/queue/{queue}", [(b"first", {"k": "1"}), (b"empty", {"k": ""}), (b"last", {"k": "3"})])
    wait_until(lambda: len(got) >= 2, timeout=60, what="the good messages forwarded")
    wait_until(lambda: bridge.status("bad")["counts"]["publish_errors"] >= 1, timeout=30, what="the skip counted")
    assert [decode(m.data).body for m in got] == [b"first", b"last"]
    assert [decode(m.data).headers["k"] for m in got] == ["1", "3"]
    assert bridge.status("bad")["state"] == "STARTED"
