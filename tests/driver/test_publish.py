"""Publishing against real node processes: bodies, batches, errors, failover, safe retries."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from driver import (
    AuthenticationError,
    BadRequest,
    ConnectError,
    Coordinates,
    Outgoing,
    PermissionDenied,
    SerializationError,
    Template,
    Unavailable,
)
from tests.driver.conftest import NODE_ENV, stored_count
from tests.driver.helpers import Always503, SlowFirstAnswerProxy, serve
from tests.support import NodeProcess, free_port


def test_send_returns_coordinates_and_keeps_a_key_on_one_partition(template: Template, topic: str) -> None:
    first = template.send(topic, "customer-7", {"total": 12})
    second = template.send(topic, "customer-7", "plain text", headers={"source": "test"})
    third = template.send(topic, "customer-7", b"\x00\x01binary")
    assert isinstance(first, Coordinates) and first.topic == topic and not first.duplicate
    assert first.partition == second.partition == third.partition
    assert [first.offset, second.offset, third.offset] == [0, 1, 2]
    assert stored_count(template, topic) == 3


def test_an_id_sent_again_is_stored_once(template: Template, topic: str) -> None:
    original = template.send(topic, None, {"n": 1}, id="order-1")
    again = template.send(topic, None, {"n": 1}, id="order-1")
    assert again.duplicate and (again.partition, again.offset) == (original.partition, original.offset)
    assert stored_count(template, topic) == 1


def test_send_batch_chunks_and_keeps_order(template: Template, topic: str) -> None:
    items = [("k", {"n": i}) for i in range(30)] + [Outgoing("k", "last", {"h": "1"}, id="last-one")]
    stored = template.send_batch(topic, iter(items), chunk_size=7)
    assert len(stored) == 31 and stored[-1].id == "last-one"
    assert [c.offset for c in stored] == list(range(31))
    assert stored_count(template, topic) == 31


def test_errors_keep_the_response_and_the_broker_code(template: Template) -> None:
    with pytest.raises(BadRequest) as info:
        template.send("not a topic!", None, 1)
    assert info.value.status_code == 400 and info.value.response is not None
    assert info.value.code == "bad_topic_name"
    with pytest.raises(SerializationError):
        template.send("fine", None, {"x": object()})
    with pytest.raises(SerializationError):
        template.send("fine", None, float("nan"))


def test_one_node_of_three_down_still_publishes(node: NodeProcess, topic: str) -> None:
    closed = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    for urls in ([*closed, node.url], [closed[0], node.url, closed[1]]):
        with Template(urls, timeout=(1.0, 5.0)) as template:
            assert template.send(topic, "k", {"ok": True}).topic == topic
            # Later calls start at the node that answered, so they do not wait on dead ones.
            assert template.current_url == node.url
    with Template(node.url) as template:
        assert stored_count(template, topic) == 2


def test_a_503_fails_over_and_only_all_503_raises_unavailable(node: NodeProcess, topic: str) -> None:
    with serve(Always503) as busy:
        with Template([busy, node.url], timeout=(1.0, 5.0)) as template:
            assert template.send(topic, None, 1).offset == 0
        with Template([busy], retries=1, backoff=0.01) as template, pytest.raises(Unavailable) as info:
            template.send(topic, None, 1)
    assert info.value.status_code == 503 and info.value.code == "unavailable"


def test_no_node_up_is_a_connect_error_naming_every_attempt() -> None:
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with Template(urls, retries=1, backoff=0.01, timeout=(0.5, 1.0)) as template:
        with pytest.raises(ConnectError) as info:
            template.send("orders", None, 1)
    assert len(info.value.errors) == 3 and info.value.status_code is None


def test_a_send_retried_after_a_timeout_is_stored_once(node: NodeProcess, topic: str) -> None:
    forwarded: list[tuple[int, dict[str, object]]] = []
    state = {"target": node.url, "delay": 2.0, "forwarded": forwarded, "lock": threading.Lock()}
    with serve(SlowFirstAnswerProxy, state) as proxy:
        with Template(proxy, timeout=(1.0, 0.5), retries=2, backoff=0.05) as template:
            coordinates = template.send(topic, "k", {"pay": 10})
    first_status, first_answer = forwarded[0]
    assert first_status == 201 and len(forwarded) >= 2  # stored, then retried after the timeout
    assert coordinates.duplicate and coordinates.offset == first_answer["offset"]
    with Template(node.url) as template:
        assert stored_count(template, topic) == 1


def test_tokens_are_sent_and_refusals_name_role_and_topic(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    env = dict(NODE_ENV, TOYMB_TOKENS="pub=publish@orders.*,cons=consume@orders.*")
    with NodeProcess(tmp_path / "secure", env=env) as secure:
        with Template(secure.url, token="pub") as template:
            assert template.send("orders.eu", None, 1).offset == 0
            with pytest.raises(PermissionDenied) as denied:
                template.send("billing", None, 1)
        assert denied.value.status_code == 403 and denied.value.topic == "billing"
        assert denied.value.role == "publish" and "billing" in str(denied.value)
        with Template(secure.url, token="cons") as template, pytest.raises(PermissionDenied) as denied:
            template.send("orders.eu", None, 1)
        assert denied.value.role == "publish" and denied.value.topic == "orders.eu"
        with Template(secure.url, token="wrong") as template, pytest.raises(AuthenticationError) as info:
            template.send("orders.eu", None, 1)
        assert info.value.status_code == 401
        monkeypatch.setenv("TOYMB_TOKEN", "pub")
        monkeypatch.setenv("TOYMB_URLS", secure.url)
        with Template() as template:  # both from the environment
            assert template.send("orders.us", None, str(uuid.uuid4())).offset == 0
