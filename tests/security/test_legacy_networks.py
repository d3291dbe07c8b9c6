"""``legacy_networks``: token-less ToyMB clients from admitted networks, on the ToyMB endpoints only,
within their scope; off by default, logged at startup, refused when malformed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from broker.app import create_app
from broker.errors import ConfigError, Forbidden

ADMITTED, STRANGER = "10.1.2.3", "10.9.9.9"
SCOPE = "10.1.0.0/16=publish+consume@orders*"


def _send(client: FlaskClient, topic: str, addr: str) -> tuple[int, str]:
    answer = client.post("/sendmessage", environ_base={"REMOTE_ADDR": addr},
                         json={"id": None, "topicName": topic, "key": "k", "body": "x", "requestor": None})
    return answer.status_code, answer.get_data(as_text=True)


@pytest.fixture
def secured(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Flask]:
    with caplog.at_level(logging.WARNING, logger="broker.security"):
        app = create_app({"data_dir": str(tmp_path), "tokens": ("root-s3cret=admin",), "legacy_networks": (SCOPE,)})
    yield app
    app.extensions["toymb"].stop()


def test_admitted_clients_use_the_toymb_endpoints_within_their_scope_and_nothing_else(
        secured: Flask, caplog: pytest.LogCaptureFixture) -> None:
    assert any("10.1.0.0/16" in r.getMessage() and "SECURITY" in r.getMessage() for r in caplog.get_records("setup"))
    client = secured.test_client()
    assert _send(client, "orders-eu", ADMITTED) == (200, "ack")
    assert _send(client, "billing", ADMITTED)[0] == 403, "outside the network's topic scope"
    assert _send(client, "orders-eu", STRANGER)[0] == 401, "a network that was not admitted needs a token"
    for method, path in (("POST", "/v1/topics/orders-eu/messages"), ("GET", "/v1/topics"), ("GET", "/metrics"),
                         ("GET", "/v1/cluster")):
        answer = client.open(path, method=method, json={"body": 1}, environ_base={"REMOTE_ADDR": ADMITTED})
        assert answer.status_code == 401, f"{method} {path} is not a ToyMB endpoint"
    sub = client.post("/subscribe", environ_base={"REMOTE_ADDR": ADMITTED},
                      json={"id": None, "topicName": "orders-eu", "groupName": "g", "type": "pull", "ip": ADMITTED,
                            "port": 9000, "requestor": None})
    assert sub.status_code == 200
    polled = client.get(f"/poll/{sub.get_data(as_text=True)}", environ_base={"REMOTE_ADDR": ADMITTED})
    assert polled.status_code == 200
    # A token still works as before from the admitted network, with its own (wider) grant.
    assert client.post("/v1/topics/billing/messages", json={"body": 1}, environ_base={"REMOTE_ADDR": ADMITTED},
                       headers={"Authorization": "Bearer root-s3cret"}).status_code == 201


def test_admitted_networks_are_push_targets_others_are_not(secured: Flask) -> None:
    node = secured.extensions["toymb"]
    node.check_push_url(f"http://{ADMITTED}:9000/receivemessage")  # no connection is made: an IP literal
    with pytest.raises(Forbidden):
        node.check_push_url(f"http://{STRANGER}:9000/receivemessage")


def test_a_node_without_tokens_admits_the_network_for_the_toymb_endpoints_only(tmp_path: Path) -> None:
    app = create_app({"data_dir": str(tmp_path), "legacy_networks": (SCOPE,)})
    try:
        client = app.test_client()
        assert _send(client, "orders-eu", ADMITTED) == (200, "ack")
        assert _send(client, "orders-eu", STRANGER)[0] == 403
        answer = client.get("/v1/topics", environ_base={"REMOTE_ADDR": ADMITTED})
        assert answer.status_code == 403 and answer.get_json()["limit"] == "loopback_only"
    finally:
        app.extensions["toymb"].stop()


def test_off_by_default(tmp_path: Path) -> None:
    app = create_app({"data_dir": str(tmp_path), "tokens": ("root-s3cret=admin",)})
    try:
        assert _send(app.test_client(), "orders-eu", ADMITTED)[0] == 401
    finally:
        app.extensions["toymb"].stop()


@pytest.mark.parametrize(("entry", "fragment"), [
    ("10.1.0.0/16", "is not CIDR=ROLE"),
    ("10.1.0.0/33=publish", "is not a CIDR"),
    ("10.1.0.0/16=admin", "unknown role 'admin'"),
    ("10.1.0.0/16=publish@", "must be followed by topic patterns"),
    ("10.1.0.0/16=", "names no role"),
])
def test_malformed_entries_stop_startup(tmp_path: Path, entry: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        create_app({"data_dir": str(tmp_path), "legacy_networks": (entry,)}, start=False)
