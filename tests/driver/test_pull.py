"""The pull consumer against a real node: long-poll fetches, commits of handled messages only."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from driver import Message, PullConsumer, Template
from tests.driver.conftest import NODE_ENV
from tests.support import NodeProcess, free_port, wait_until


class Stop(Exception):
    pass


def committed(template: Template, topic: str, group: str, partition: int) -> int:
    """The group's next offset to deliver on ``partition`` (committed offset + 1)."""
    return int(template.group_info(topic, group)["committed"][str(partition)])


def test_iterator_commits_only_what_the_loop_handled(node: NodeProcess, template: Template,
                                                     topic: str) -> None:
    sent = [template.send(topic, "k", {"n": n}) for n in range(6)]
    partition = sent[0].partition
    handled: list[int] = []
    consumer = PullConsumer(topic, "reports", template=template, subscriber_id="reports-1", start="earliest",
                            wait_ms=300)
    with pytest.raises(Stop):
        for message in consumer:
            if message.body["n"] == 3:
                raise Stop  # the handler of message 3 failed
            handled.append(message.body["n"])
    consumer.close(deregister=False)
    assert handled == [0, 1, 2]
    assert committed(template, topic, "reports", partition) == sent[2].offset + 1

    # The same subscriber id, started again, goes on from the first unhandled message.
    again: list[int] = []
    with PullConsumer(topic, "reports", template=template, subscriber_id="reports-1",
                      wait_ms=300) as consumer:
        for message in consumer:
            again.append(message.body["n"])
            if message.body["n"] == 5:
                consumer.stop()
    assert again == [3, 4, 5]
    assert committed(template, topic, "reports", partition) == sent[5].offset + 1


def test_callback_loop_redelivers_a_failed_message_in_order(node: NodeProcess, template: Template,
                                                            topic: str) -> None:
    for n in range(5):
        template.send(topic, "k", {"n": n})
    seen: list[int] = []
    failed = threading.Event()
    consumer = PullConsumer(topic, "ledger", template=template, start="earliest", wait_ms=300)

    def handle(message: Message) -> None:
        n = message.body["n"]
        seen.append(n)
        if n == 2 and not failed.is_set():
            failed.set()
            raise RuntimeError("database busy")
        if n == 4:
            consumer.stop()

    runner = threading.Thread(target=consumer.run, args=(handle,), daemon=True)
    runner.start()
    runner.join(30)
    consumer.close()
    assert not runner.is_alive()
    # 3 and 4 were fetched with 2 but held back until 2 came again (after the redelivery timeout).
    assert seen == [0, 1, 2, 2, 3, 4]
    info = template.group_info(topic, "ledger")
    assert info["total_lag"] == 0 and info["subscribers"] == []  # all committed, and close() deregistered


def test_a_pull_consumer_started_before_its_node_waits_for_it(tmp_path: Path, topic: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    got: list[Message] = []
    with Template(url, timeout=(0.5, 5.0), retries=0) as template:
        consumer = PullConsumer(topic, "late", template=template, start="earliest", wait_ms=300)
        runner = threading.Thread(target=consumer.run, args=(got.append,), daemon=True)
        runner.start()
        with NodeProcess(tmp_path / "late", port=port, env=NODE_ENV) as late:
            template.send(topic, "k", "hello")
            wait_until(lambda: got, timeout=30, what="the message")
            consumer.stop()
            runner.join(10)
            consumer.close()
            assert late.url == url
    assert [m.body for m in got] == ["hello"]
