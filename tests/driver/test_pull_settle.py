"""The driver's pull side of issue 21: delivery_attempt, message.nack(), message.extend(), Template.seek."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from driver import Consumer, Message, PullConsumer, Template, subscribe
from tests.support import NodeProcess, wait_until


def test_nack_redelivers_at_once_with_the_next_attempt_and_keeps_order(node: NodeProcess, template: Template,
                                                                       topic: str) -> None:
    template.create_topic(topic, 1)
    template.send_batch(topic, [("k", {"n": n}) for n in range(4)])
    seen: list[tuple[int, int]] = []
    given_back = {"left": 1}
    with PullConsumer(topic, "g", template=template, start="earliest", wait_ms=500) as consumer:
        for message in consumer:
            seen.append((message.body["n"], message.delivery_attempt))
            if message.body["n"] == 1 and given_back["left"]:
                given_back["left"] -= 1
                message.nack()
            if len(seen) >= 5:
                break
    assert seen == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)], "1 comes back at once, before 2, as attempt 2"


def test_extend_keeps_a_slow_message_from_being_redelivered(node: NodeProcess, template: Template,
                                                            topic: str) -> None:
    template.create_topic(topic, 1)
    template.send(topic, "k", {"n": 0})
    attempts: list[int] = []

    def slow(message: Message) -> None:
        attempts.append(message.delivery_attempt)
        message.extend(10_000)
        time.sleep(2.0)  # past the node's redelivery period (1.5 s)
        consumer.stop()

    consumer = PullConsumer(topic, "g", template=template, start="earliest", wait_ms=200)
    try:
        consumer.run(slow)
        assert attempts == [1]
        again = template.fetch(topic, "g", consumer.subscriber_id, wait_ms=0)
        assert again == [], "handled and committed, never redelivered"
    finally:
        consumer.close()


def test_template_seek_replays_from_a_timestamp(node: NodeProcess, template: Template, topic: str) -> None:
    template.create_topic(topic, 2)
    with PullConsumer(topic, "g", template=template, start="earliest", wait_ms=300) as consumer:
        first = [template.send(topic, f"k{n}", {"n": n}) for n in range(3)]
        time.sleep(0.01)
        cut = int(time.time() * 1000)
        later = [template.send(topic, f"k{n}", {"n": n}) for n in range(3, 6)]
        got: list[Message] = []
        for message in consumer:
            got.append(message)
            if len(got) == 6:
                break
        consumer.commit()
        assert len(first) == 3
        moved = template.seek(topic, "g", timestamp=cut)
        assert moved == {p: min((c.offset for c in later if c.partition == p), default=moved[p]) for p in moved}
        replay: list[Message] = []
        for message in consumer:
            replay.append(message)
            if len(replay) == 3:
                break
    assert sorted(m.body["n"] for m in replay) == [3, 4, 5]
    with pytest.raises(RuntimeError):
        Message(id="x", topic=topic, partition=0, offset=0, key=None, body=None).nack()


def test_toymb_seek_moves_a_group_from_the_command_line(node: NodeProcess, template: Template, topic: str) -> None:
    template.create_topic(topic, 2)
    sent = [template.send(topic, f"k{n}", {"n": n}) for n in range(6)]
    sid = template.register(topic, "g", mode="pull", start="latest").subscriber_id
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env["TOYMB_URLS"] = node.url

    def toymb_seek(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "seek", topic, "g", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    done = toymb_seek("--to", "earliest", "--partition", "0")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"0": 0}
    assert {m.id for m in template.fetch(topic, "g", sid, wait_ms=0)} == {c.id for c in sent if c.partition == 0}
    p1 = [c for c in sent if c.partition == 1]
    done = toymb_seek("--offset", f"1={p1[-1].offset}")
    assert json.loads(done.stdout) == {"1": p1[-1].offset}
    iso = toymb_seek("--timestamp", "2001-01-01T00:00:00")
    assert iso.returncode == 0 and json.loads(iso.stdout) == {"0": 0, "1": 0}
    for bad in (("--to", "earliest", "--timestamp", "1"), ("--offset", "x"), ("--timestamp", "yesterday"), ()):
        assert toymb_seek(*bad).returncode != 0, bad
    gone = subprocess.run([sys.executable, "-m", "broker", "seek", topic, "nogroup", "--to", "latest"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode != 0 and "does not exist" in gone.stderr


def test_subscribe_and_pull_consumer_carry_the_groups_filter(node: NodeProcess, template: Template,
                                                            topic: str) -> None:
    pushed: list[Message] = []

    @subscribe(topic=topic, group="eu-push", start="earliest", filter="msg.header.region^=eu-",
               dead_letter={"max_attempts": 3})
    def handle(message: Message) -> None:
        pushed.append(message)

    template.create_topic(topic, 2)
    for n, region in enumerate(["eu-west", "us-east", "eu-north", "ap"]):
        template.send(topic, f"k{n}", {"n": n}, headers={"region": region})
    with Consumer(handle, template=template, app_name="filters") as consumer:
        assert consumer.wait_registered(30)
        pulled: list[Message] = []
        with PullConsumer(topic, "eu-pull", template=template, start="earliest", wait_ms=300,
                          filter="msg.header.region^=eu-") as puller:
            for message in puller:
                pulled.append(message)
                if len(pulled) == 2:
                    break
        wait_until(lambda: len(pushed) >= 2, timeout=30, what="the matching pushes")
    assert sorted(m.body["n"] for m in pushed) == [0, 2] == sorted(m.body["n"] for m in pulled)
    info = template.group_info(topic, "eu-push")
    assert info["filter"] == "msg.header.region^=eu-" and info["dead_letter"]["max_attempts"] == 3
