"""Each configured limit answers a 4xx JSON error that names it, and stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from broker.app import create_app
from tests.support import NodeProcess

LIMITS = {
    "max_body": 100,
    "max_request": 4000,
    "max_batch": 3,
    "max_headers": 2,
    "max_header_name": 5,
    "max_header_value": 10,
    "max_id": 8,
    "max_wait_ms": 100,
    "max_fetch": 5,
    "max_subscribers": 1,
    "max_partitions": 50,
    "default_partitions": 4,
}


@pytest.fixture
def limited_app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path), **LIMITS})
    yield app
    app.extensions["toymb"].stop()


@pytest.fixture
def limited(limited_app: Flask) -> FlaskClient:
    return limited_app.test_client()


PUBLISH_CASES: list[tuple[str, Any, int, str]] = [
    ("body", {"body": "x" * 101}, 413, "body"),
    ("body_base64", {"body_base64": "eHh4" * 34}, 413, "body"),
    ("batch", {"messages": [{"body": 1}] * 4}, 400, "batch"),
    ("headers", {"body": 1, "headers": {"a": "1", "b": "2", "c": "3"}}, 400, "headers"),
    ("header_name", {"body": 1, "headers": {"abcdef": "1"}}, 400, "header_name"),
    ("header_value", {"body": 1, "headers": {"a": "x" * 11}}, 400, "header_value"),
    ("id", {"body": 1, "id": "x" * 9}, 400, "id"),
    ("key", {"body": 1, "key": "k" * 9}, 400, "key"),
    ("content_type", {"body": "x", "content_type": "text/" + "x" * 200}, 400, "content_type"),
    ("body_in_batch", {"messages": [{"body": 1}, {"body": "x" * 101}]}, 413, "body"),
]


@pytest.mark.parametrize(
    "payload, status, limit", [c[1:] for c in PUBLISH_CASES], ids=[c[0] for c in PUBLISH_CASES]
)
def test_publish_limits(limited: FlaskClient, payload: Any, status: int, limit: str) -> None:
    answer = limited.post("/v1/topics/t/messages", json=payload)
    assert answer.status_code == status, answer.json
    assert answer.json["limit"] == limit and isinstance(answer.json["max"], int)
    assert str(answer.json["max"]) in answer.json["message"]
    topic = limited.get("/v1/topics/t")
    assert topic.status_code == 404 or not any(topic.json["end_offsets"].values())  # nothing stored


def test_just_under_every_publish_limit_is_accepted(limited: FlaskClient) -> None:
    message = {"id": "i" * 8, "key": "k" * 8, "headers": {"abcde": "v" * 10, "b": ""}, "body": "x" * 98}
    answer = limited.post("/v1/topics/t/messages", json={"messages": [message, {"body": 1}, {"body": 2}]})
    assert answer.status_code == 201, answer.json


def test_compat_publish_body_limit(limited: FlaskClient) -> None:
    answer = limited.post("/sendmessage", json={"topicName": "t", "key": "k", "body": "x" * 101})
    assert answer.status_code == 413 and answer.json["limit"] == "body"


def test_request_size_limit_in_process(limited: FlaskClient) -> None:
    answer = limited.post(
        "/v1/topics/t/messages", data=b"{" + b" " * 5000 + b"}", content_type="application/json"
    )
    assert answer.status_code == 413 and answer.json["error"] == "payload_too_large"


def test_name_length(limited: FlaskClient) -> None:
    answer = limited.post(f"/v1/topics/{'t' * 201}/messages", json={"body": 1})
    assert answer.status_code == 400 and "{1,200}" in answer.json["message"]
    assert limited.post(f"/v1/topics/{'t' * 200}/messages", json={"body": 1}).status_code == 201
    answer = limited.post(f"/v1/topics/t/groups/{'g' * 201}/subscribers", json={"mode": "pull"})
    assert answer.status_code == 400 and answer.json["error"] == "bad_group_name"


def test_partitions(limited: FlaskClient) -> None:
    for bad in (0, -1, 51):
        answer = limited.put("/v1/topics/p", json={"partitions": bad})
        assert answer.status_code == 400 and answer.json["error"] == "bad_partitions", bad
        assert limited.post("/advertise", json={"topicName": "p", "partitions": bad}).status_code == 400
    assert "50" in limited.put("/v1/topics/p", json={"partitions": 51}).json["message"]
    assert limited.put("/v1/topics/p", json={"partitions": 50}).status_code == 201
    # An existing topic re-advertised with an out-of-range count is still refused (found by schemathesis).
    assert limited.post("/advertise", json={"topicName": "p", "partitions": 51}).status_code == 400
    assert (
        limited.post("/advertise", json={"topicName": "p", "partitions": 50}).get_data(as_text=True) == "ack"
    )


def test_fetch_and_group_limits(limited: FlaskClient) -> None:
    sid = limited.post("/v1/topics/t/groups/g/subscribers", json={"mode": "pull"}).json["subscriber_id"]
    base = f"/v1/topics/t/groups/g/messages?subscriber={sid}"
    answer = limited.get(base + "&wait_ms=101")
    assert answer.status_code == 400 and answer.json["limit"] == "wait_ms" and answer.json["max"] == 100
    answer = limited.get(base + "&max=6")
    assert answer.status_code == 400 and answer.json["limit"] == "max" and answer.json["max"] == 5
    assert limited.get(base + "&max=5&wait_ms=100").status_code == 200
    answer = limited.post("/v1/topics/t/groups/g/subscribers", json={"mode": "pull"})
    assert answer.status_code == 400 and answer.json["limit"] == "subscribers" and answer.json["max"] == 1


@pytest.mark.parametrize(
    "raw",
    [
        '{"body": NaN}',
        '{"body": Infinity}',
        '{"body": 1e400}',
        '{"body": "\\ud800"}',
        '{"body": 1, "id": "\\udfff"}',
        '{"body": 1, "key": "a\\ud800b"}',
        '{"body": 1, "headers": {"h": "\\ud800"}}',
        '{"body": "\\ud800", "content_type": "text/plain"}',
        '{"body": ' + "[" * 100000 + "]" * 100000 + "}",
        '{"body": 1, "content_type": "\\ud800"}',
        '{"topicName": "t", "body": "\\ud800"}',
    ],
)
def test_hostile_json_is_a_400(limited_app: Flask, raw: str) -> None:
    app = create_app({"data_dir": limited_app.extensions["toymb"].settings.data_dir + "/big"})
    try:
        client = app.test_client()
        path = "/sendmessage" if "topicName" in raw else "/v1/topics/t/messages"
        answer = client.post(path, data=raw, content_type="application/json")
        assert answer.status_code == 400, answer.data
        assert answer.json["error"] in ("bad_json", "bad_field")
        assert client.get("/v1/topics/t").status_code == 404
    finally:
        app.extensions["toymb"].stop()


def test_a_paired_surrogate_escape_is_fine(limited: FlaskClient) -> None:
    answer = limited.post(
        "/v1/topics/t/messages", data='{"body": "\\ud83d\\ude00"}', content_type="application/json"
    )
    assert answer.status_code == 201


@pytest.mark.slow
def test_request_size_limit_on_a_real_node(tmp_path: Path) -> None:
    with NodeProcess(tmp_path, env={"TOYMB_MAX_REQUEST": "4000"}) as node:
        answer = requests.post(
            f"{node.url}/v1/topics/t/messages",
            data=b"{" + b" " * 5000 + b"}",
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert answer.status_code == 413
        assert answer.json()["error"] == "payload_too_large" and answer.json()["limit"] == "request"
        assert "4000" in answer.json()["message"]
        ok = requests.post(f"{node.url}/v1/topics/t/messages", json={"body": "x" * 3000}, timeout=10)
        assert ok.status_code == 201
