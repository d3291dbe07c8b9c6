"""The driver against a token-protected node: tokens travel, refusals raise the documented errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from driver import AuthenticationError, PermissionDenied, Template
from tests.support import NodeProcess

from .conftest import ADM, CON, PUB, TOKENS


@pytest.fixture(scope="module")
def secured_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    node = NodeProcess(
        tmp_path_factory.mktemp("driver-auth"),
        env={"TOYMB_TOKENS": ",".join(TOKENS), "TOYMB_DEFAULT_PARTITIONS": "4"},
    )
    node.start()
    yield node
    node.stop()


def test_publish_and_consume_with_tokens(secured_node: NodeProcess) -> None:
    with Template(secured_node.url, token=PUB) as pub, Template(secured_node.url, token=CON) as con:
        coords = pub.send("orders.paid", "customer-7", {"total": 12})  # a consume token cannot create it
        sub = con.register("orders.paid", "billing", mode="pull", start="earliest")
        messages = con.fetch("orders.paid", "billing", sub.subscriber_id, wait_ms=2000)
        assert [(m.partition, m.offset, m.body) for m in messages] == [
            (coords.partition, coords.offset, {"total": 12})
        ]


def test_no_or_unknown_token_raises_authentication_error(
    secured_node: NodeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOYMB_TOKEN", raising=False)
    for token in (None, "not-a-token"):
        with Template(secured_node.url, token=token) as t, pytest.raises(AuthenticationError) as caught:
            t.send("orders.paid", None, {"n": 1})
        assert caught.value.status_code == 401 and caught.value.code == "unauthorized"


def test_token_from_the_environment(secured_node: NodeProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOYMB_TOKEN", PUB)
    with Template(secured_node.url) as t:
        assert t.send("orders.env", None, "hello").offset >= 0


def test_wrong_topic_names_the_role_and_topic(secured_node: NodeProcess) -> None:
    with Template(secured_node.url, token=PUB) as t, pytest.raises(PermissionDenied) as caught:
        t.send("payroll", None, {"n": 1})
    assert (caught.value.role, caught.value.topic) == ("publish", "payroll")
    assert "payroll" in str(caught.value) and "publish" in str(caught.value)
    assert PUB not in str(caught.value)


def test_wrong_role_names_the_role_and_topic(secured_node: NodeProcess) -> None:
    with Template(secured_node.url, token=CON) as t:
        with pytest.raises(PermissionDenied) as caught:
            t.send("orders.paid", None, {"n": 1})
        assert (caught.value.role, caught.value.topic) == ("publish", "orders.paid")
        with pytest.raises(PermissionDenied) as caught:
            t.create_topic("orders.new", 4)
        assert caught.value.role == "publish"
    with Template(secured_node.url, token=PUB) as t, pytest.raises(PermissionDenied) as caught:
        t.register("orders.paid", "spies", mode="pull")
    assert (caught.value.role, caught.value.topic) == ("consume", "orders.paid")


def test_admin_reaches_everything(secured_node: NodeProcess) -> None:
    with Template(secured_node.url, token=ADM) as t:
        t.create_topic("payroll", 4)
        t.send("payroll", "k", {"n": 1})
        assert t.topic_info("payroll")["partitions"] == 4


def test_tokens_never_reach_the_log(secured_node: NodeProcess) -> None:
    """Runs last in this module: after good and bad tokens were sent, none appears in the node's log."""
    with Template(secured_node.url, token="guessed-token-123") as t, pytest.raises(AuthenticationError):
        t.send("orders.paid", None, 1)
    log = secured_node.log_tail(100_000)
    assert "security: 4 token(s)" in log  # the log is there and names the count only
    for secret in (PUB, CON, ADM, "guessed-token-123"):
        assert secret not in log
