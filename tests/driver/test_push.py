"""Push consumers (the embedded receiver) against a real node."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

from driver import Consumer, Message, Template, subscribe
from tests.driver.conftest import NODE_ENV
from tests.support import NodeProcess, free_port, wait_until


def by_key(messages: list[Message]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for m in messages:
        out[str(m.key)].append(m.body["n"])
    return dict(out)


def test_a_function_and_a_class_both_receive_in_order_per_key(node: NodeProcess, template: Template,
                                                              topic: str) -> None:
    fn_seen: list[Message] = []
    lock = threading.Lock()

    @subscribe(topic=topic, group="fn")
    def handle(message: Message) -> None:
        with lock:
            fn_seen.append(message)

    @subscribe(topic=topic, group="cls")
    class Counter:
        seen: list[Message] = []

        def consume(self, message: Message) -> None:
            with lock:
                self.seen.append(message)

    with Consumer(handle, Counter, template=template, app_name="shop") as consumer:
        assert consumer.wait_registered(30)
        template.send_batch(topic, [(f"key-{k}", {"n": n}) for n in range(10) for k in range(4)])
        template.send(topic, "key-0", "text body", headers={"h": "1"})
        wait_until(lambda: len(fn_seen) == 41 and len(Counter.seen) == 41, timeout=30, what="41 + 41 pushes")
    expected = {f"key-{k}": list(range(10)) for k in range(4)}
    for seen in (fn_seen, Counter.seen):
        assert by_key([m for m in seen if m.content_type == "application/json"]) == expected
        last = [m for m in seen if m.key == "key-0"][-1]
        assert last.body == "text body" and last.headers == {"h": "1"} and last.topic == topic


def test_a_raising_handler_gets_its_message_again_in_order(node: NodeProcess, template: Template,
                                                          topic: str) -> None:
    seen: list[int] = []
    failures = {2: 2}  # message 2 fails twice, then succeeds

    @subscribe(topic=topic, group="flaky")
    def handle(message: Message) -> None:
        n = message.body["n"]
        seen.append(n)
        if failures.get(n):
            failures[n] -= 1
            raise RuntimeError("not now")

    with Consumer(handle, template=template, app_name="shop") as consumer:
        assert consumer.wait_registered(30)
        for n in range(5):
            template.send(topic, "same-key", {"n": n})
        wait_until(lambda: seen[-1:] == [4], timeout=30, what="the last message")
    assert seen == [0, 1, 2, 2, 2, 3, 4]


def test_a_restarted_consumer_keeps_its_id_and_partitions(node: NodeProcess, template: Template,
                                                         topic: str) -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}

    @subscribe(topic=topic, group="billing")
    def handle_a(message: Message) -> None:
        got["a"].append(message.partition)

    @subscribe(topic=topic, group="billing")
    def handle_b(message: Message) -> None:
        got["b"].append(message.partition)

    first = Consumer(handle_a, template=template, app_name="app-a").start()
    other = Consumer(handle_b, template=template, app_name="app-b").start()
    try:
        assert first.wait_registered(30) and other.wait_registered(30)
        wait_until(lambda: len(template.group_info(topic, "billing")["subscribers"]) == 2, timeout=30,
                   what="two subscribers")
        (sid,) = first.subscriber_ids
        before = sorted(p for p, s in template.group_info(topic, "billing")["assignment"].items() if s == sid)
        assert 0 < len(before) < 100
        first.stop(deregister=False)  # a crash or a redeploy: no goodbye
        restarted = Consumer(handle_a, template=template, app_name="app-a").start()
        try:
            assert restarted.wait_registered(30)
            assert restarted.subscriber_ids == [sid]
            info = template.group_info(topic, "billing")
            assert len(info["subscribers"]) == 2  # not a third one, as with a fresh id per start
            after = sorted(p for p, s in info["assignment"].items() if s == sid)
            assert after == before
            # And the pushes follow it to its new port.
            target = int(before[0])
            key = next(f"k{i}" for i in range(100_000)
                       if template.send(topic, f"k{i}", {"n": i}, id=f"probe-{i}").partition == target)
            assert key
            wait_until(lambda: target in got["a"], timeout=30, what="a push to the restarted consumer")
        finally:
            restarted.stop()
    finally:
        other.stop()


def test_a_consumer_started_before_the_node_registers_once_it_is_up(tmp_path: Path, topic: str) -> None:
    got: list[Message] = []

    @subscribe(topic=topic, group="early", start="earliest")
    def handle(message: Message) -> None:
        got.append(message)

    port = free_port()
    with Template(f"http://127.0.0.1:{port}", timeout=(0.5, 5.0), retries=0) as template:
        with Consumer(handle, template=template, app_name="early-bird") as consumer:
            assert not consumer.wait_registered(1.0)  # no node yet, and no crash either
            with NodeProcess(tmp_path / "late", port=port, env=NODE_ENV):
                assert consumer.wait_registered(30)
                template.send(topic, "k", {"n": 1})
                wait_until(lambda: got, timeout=30, what="the push")
    assert got[0].body == {"n": 1}
