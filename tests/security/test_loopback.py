"""The safe default: with no tokens a node serves only loopback clients, says so once, and
``toymb serve`` refuses a non-loopback address unless told to."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from broker import config
from broker.app import create_app
from broker.errors import ConfigError
from broker.security import check_bind
from tests.support import NodeProcess, free_port

from .conftest import ADM, CLUSTER, bearer

REQUESTS = [
    ("GET", "/health"),
    ("GET", "/v1/topics"),
    ("POST", "/v1/topics/t/messages"),
    ("GET", "/metrics"),
    ("POST", "/sendmessage"),
    ("GET", "/openapi.json"),
]


@pytest.fixture
def open_app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path)})
    yield app
    app.extensions["toymb"].stop()


@pytest.mark.parametrize("method, path", REQUESTS)
@pytest.mark.parametrize(
    "remote", ["10.1.2.3", "192.168.0.7", "2001:db8::1", "::ffff:10.0.0.1", "169.254.169.254"]
)
def test_non_loopback_clients_are_refused(open_app: Flask, method: str, path: str, remote: str) -> None:
    answer = open_app.test_client().open(
        path, method=method, json={"body": 1}, environ_base={"REMOTE_ADDR": remote}
    )
    assert answer.status_code == 403
    assert answer.json["error"] == "forbidden" and answer.json["limit"] == "loopback_only"
    assert "TOYMB_TOKENS" in answer.json["message"]


@pytest.mark.parametrize("remote", ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"])
def test_loopback_clients_are_served(open_app: Flask, remote: str) -> None:
    client: FlaskClient = open_app.test_client()
    env = {"REMOTE_ADDR": remote}
    assert client.post("/v1/topics/t/messages", json={"body": 1}, environ_base=env).status_code == 201
    assert client.get("/metrics", environ_base=env).status_code == 200


def test_allow_remote_serves_everyone(tmp_path: Path) -> None:
    app = create_app({"data_dir": str(tmp_path), "allow_remote": True})
    try:
        answer = app.test_client().post(
            "/v1/topics/t/messages", json={"body": 1}, environ_base={"REMOTE_ADDR": "10.1.2.3"}
        )
        assert answer.status_code == 201
    finally:
        app.extensions["toymb"].stop()


def test_with_tokens_remote_clients_need_only_a_token(secure_app: Flask) -> None:
    client = secure_app.test_client()
    env = {"REMOTE_ADDR": "10.1.2.3"}
    assert client.get("/v1/topics", environ_base=env).status_code == 401
    assert client.get("/v1/topics", headers=bearer(ADM), environ_base=env).status_code == 200


def test_a_peer_with_the_cluster_token_passes_the_loopback_rule(tmp_path: Path) -> None:
    app = create_app({"data_dir": str(tmp_path), "cluster_token": CLUSTER})
    try:
        client = app.test_client()
        env = {"REMOTE_ADDR": "10.1.2.3"}
        assert client.get("/v1/topics", environ_base=env).status_code == 403
        ok = client.get("/v1/topics", headers={"X-ToyMB-Cluster-Token": CLUSTER}, environ_base=env)
        assert ok.status_code == 200
        bad = client.get("/v1/topics", headers={"X-ToyMB-Cluster-Token": "guess"}, environ_base=env)
        assert bad.status_code == 401
    finally:
        app.extensions["toymb"].stop()


def test_one_clear_warning_at_startup(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="broker.security"):
        app = create_app({"data_dir": str(tmp_path / "a")}, start=False)
        secured = create_app({"data_dir": str(tmp_path / "b"), "tokens": ("x=admin",)}, start=False)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "broker.security"]
    assert len(warnings) == 1
    assert "only loopback" in warnings[0].getMessage() and "TOYMB_TOKENS" in warnings[0].getMessage()
    for a in (app, secured):
        a.extensions["toymb"].store.dispose()


@pytest.mark.parametrize(
    "overrides, refused",
    [
        ({"host": "0.0.0.0"}, True),
        ({"host": "192.168.1.10"}, True),
        ({"host": "::"}, True),
        ({"host": "127.0.0.1"}, False),
        ({"host": "localhost"}, False),
        ({"host": "::1"}, False),
        ({"host": "0.0.0.0", "allow_remote": True}, False),
        ({"host": "0.0.0.0", "tokens": ("t=admin",)}, False),
    ],
)
def test_bind_check(overrides: dict[str, object], refused: bool) -> None:
    settings = config.load(env={}, overrides=overrides)
    if refused:
        with pytest.raises(ConfigError, match="refusing to bind"):
            check_bind(settings)
    else:
        check_bind(settings)


@pytest.mark.slow
def test_serve_refuses_a_non_loopback_address_without_tokens(tmp_path: Path) -> None:
    """A real ``toymb serve``: it exits with a clear message and never listens."""
    port = free_port()
    node = NodeProcess(tmp_path, port=port, env={"TOYMB_HOST": "0.0.0.0"}).start(wait=False)
    try:
        assert node.proc is not None
        code = node.proc.wait(timeout=60)
        assert code != 0
        log = node.log_tail()
        assert "refusing to bind 0.0.0.0" in log and "TOYMB_TOKENS" in log
    finally:
        node.stop()


@pytest.mark.slow
def test_a_real_node_refuses_nothing_from_loopback_and_logs_the_warning(tmp_path: Path) -> None:
    import requests

    with NodeProcess(tmp_path) as node:
        answer = requests.post(f"{node.url}/v1/topics/t/messages", json={"body": 1}, timeout=10)
        assert answer.status_code == 201
    assert node.log_tail(200).count("SECURITY: no tokens configured") == 1
