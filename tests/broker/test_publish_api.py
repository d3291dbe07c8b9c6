"""Publishing over HTTP, in-process: the answers a client sees."""

from __future__ import annotations

import base64

import pytest
import requests
from flask.testing import FlaskClient

from broker.envelope import render_row
from broker.partitioning import partition_for
from tests.support import NodeProcess


def test_single_publish_answers_coordinates_and_is_readable(client: FlaskClient) -> None:
    r = client.post("/v1/topics/orders/messages", json={"key": "c-7", "body": {"total": 12},
                                                         "headers": {"trace": "abc"}})
    assert r.status_code == 201
    coords = r.get_json()
    assert coords["topic"] == "orders" and coords["partition"] == partition_for("c-7", 100)
    assert coords["offset"] == 0 and coords["id"]
    topic = client.get("/v1/topics/orders").get_json()
    assert topic["partitions"] == 100 and topic["end_offsets"][str(coords["partition"])] == 1
    node = client.application.extensions["toymb"]
    row = render_row(node.store.read_range("orders", coords["partition"], 0, 1)[0])
    assert row["body"] == {"total": 12} and row["headers"] == {"trace": "abc"} and row["key"] == "c-7"
    assert row["content_type"] == "application/json" and row["timestamp"] > 1_600_000_000_000


def test_batch_publish_keeps_order_and_text_and_binary_bodies(client: FlaskClient) -> None:
    raw = bytes(range(256))
    r = client.post("/v1/topics/mixed/messages", json={"messages": [
        {"id": "a", "key": "k", "body": "hello", "content_type": "text/plain"},
        {"id": "b", "key": "k", "body_base64": base64.b64encode(raw).decode()},
        {"id": "c", "key": "k", "body": [1, 2, 3]},
    ]})
    assert r.status_code == 201
    out = r.get_json()["messages"]
    assert [m["id"] for m in out] == ["a", "b", "c"] and [m["offset"] for m in out] == [0, 1, 2]
    store = client.application.extensions["toymb"].store
    rows = [render_row(r) for r in store.read_range("mixed", out[0]["partition"], 0, 10)]
    assert rows[0]["body"] == "hello" and rows[0]["content_type"] == "text/plain"
    assert base64.b64decode(rows[1]["body_base64"]) == raw
    assert rows[1]["content_type"] == "application/octet-stream"
    assert rows[2]["body"] == [1, 2, 3]


def test_republishing_an_id_answers_200_with_the_original_coordinates(client: FlaskClient) -> None:
    first = client.post("/v1/topics/t/messages", json={"id": "m-1", "body": 1})
    second = client.post("/v1/topics/t/messages", json={"id": "m-1", "body": 2})
    assert first.status_code == 201 and second.status_code == 200
    assert {k: second.get_json()[k] for k in ("partition", "offset")} == \
        {k: first.get_json()[k] for k in ("partition", "offset")}
    assert sum(client.get("/v1/topics/t").get_json()["end_offsets"].values()) == 1


def test_topics_put_get_list(client: FlaskClient) -> None:
    assert client.put("/v1/topics/small", json={"partitions": 3}).status_code == 201
    assert client.put("/v1/topics/small", json={"partitions": 3}).status_code == 200
    assert client.put("/v1/topics/small", json={"partitions": 4}).status_code == 400
    assert client.get("/v1/topics/small").get_json()["partitions"] == 3
    assert client.get("/v1/topics/nope").status_code == 404
    client.post("/v1/topics/auto/messages", json={"body": None})
    names = [t["name"] for t in client.get("/v1/topics").get_json()["topics"]]
    assert names == ["auto", "small"]


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/v1/topics/bad%20name/messages", {"body": 1}, 400, "bad_topic_name"),
    ("/v1/topics/" + "x" * 201 + "/messages", {"body": 1}, 400, "bad_topic_name"),
    ("/v1/topics/t/messages", [1, 2], 400, "bad_message"),
    ("/v1/topics/t/messages", {"body": 1, "extra": 2}, 400, "bad_message"),
    ("/v1/topics/t/messages", {"key": 5, "body": 1}, 400, "bad_field"),
    ("/v1/topics/t/messages", {"headers": {"a": 1}, "body": 1}, 400, "bad_field"),
    ("/v1/topics/t/messages", {"headers": {f"h{i}": "v" for i in range(65)}, "body": 1}, 400, "limit_exceeded"),
    ("/v1/topics/t/messages", {"headers": {"h": "v" * 8193}, "body": 1}, 400, "limit_exceeded"),
    ("/v1/topics/t/messages", {"body_base64": "***"}, 400, "bad_field"),
    ("/v1/topics/t/messages", {}, 400, "bad_field"),
    ("/v1/topics/t/messages", {"messages": []}, 400, "bad_batch"),
    ("/v1/topics/t/messages", {"messages": [{"body": 1}] * 1001}, 400, "limit_exceeded"),
    ("/v1/topics/t/messages", {"body": "x" * (1 << 20)}, 413, "payload_too_large"),
    ("/v1/topics/t", {"partitions": "many"}, 400, "bad_partitions"),
])
def test_bad_input_gets_an_explaining_4xx_and_stores_nothing(client: FlaskClient, path: str, body: object,
                                                             status: int, code: str) -> None:
    method = client.put if path == "/v1/topics/t" else client.post
    r = method(path, json=body)
    assert r.status_code == status, r.get_data(as_text=True)
    payload = r.get_json()
    assert payload["error"] == code and payload["message"]
    assert client.application.extensions["toymb"].store.count_messages() == 0


def test_broken_json_and_oversized_request(client: FlaskClient) -> None:
    r = client.post("/v1/topics/t/messages", data=b"{not json", content_type="application/json")
    assert r.status_code == 400 and r.get_json()["error"] == "bad_json"
    r = client.post("/v1/topics/t/messages", data=b"\xff\xfe", content_type="application/json")
    assert r.status_code == 400
    r = client.post("/v1/topics/t/messages", data=b"x" * (17 << 20), content_type="application/json")
    assert r.status_code == 413 and r.get_json()["error"] == "payload_too_large"
    assert client.get("/no/such/path").get_json()["error"] == "not_found"


def test_toymb_compatible_publishing(client: FlaskClient) -> None:
    assert client.post("/advertise", json={"topicName": "legacy", "partitions": 10}).get_data(as_text=True) == "ack"
    r = client.post("/sendmessage", json={"id": "j-1", "topicName": "legacy", "key": "k1",
                                          "body": "{\"amount\":3}", "requestor": None})
    assert r.status_code == 200 and r.get_data(as_text=True) == "ack"
    topic = client.get("/v1/topics/legacy").get_json()
    assert topic["partitions"] == 10
    part = partition_for("k1", 10)
    row = render_row(client.application.extensions["toymb"].store.read_range("legacy", part, 0, 1)[0])
    assert row["id"] == "j-1" and row["body"] == "{\"amount\":3}"
    assert client.post("/sendmessage", json={"topicName": "bad name", "key": "k", "body": "x"}).status_code == 400


def test_health_ready_metrics(client: FlaskClient) -> None:
    assert client.get("/health").get_json()["status"] == "up"
    assert client.get("/ready").status_code == 200
    client.post("/v1/topics/t/messages", json={"body": 1})
    text = client.get("/metrics").get_data(as_text=True)
    assert "toymb_published_messages_total 1.0" in text
    assert "toymb_publish_latency_seconds_bucket" in text
    client.post("/v1/topics/t/messages", json={"messages": [{"body": i} for i in range(3)]})
    text = client.get("/metrics").get_data(as_text=True)
    assert "toymb_group_commit_rows_count 2.0" in text and "toymb_group_commit_rows_sum 4.0" in text


def test_unknown_paths_and_methods_say_what_the_api_takes(client: FlaskClient) -> None:
    r = client.get("/v1/topic/t/messages")   # a typo of /v1/topics
    assert r.status_code == 404 and r.is_json
    assert r.get_json()["api"] == "/openapi.json" and "/openapi.json" in r.get_json()["message"]
    r = client.delete("/v1/topics/t/messages")
    assert r.status_code == 405 and r.get_json()["error"] == "method_not_allowed"
    allowed = {m.strip() for m in r.headers["Allow"].split(",")}
    assert "POST" in allowed and "DELETE" not in allowed
    assert "POST" in r.get_json()["message"]


def test_metrics_name_their_charset_once(client: FlaskClient) -> None:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].count("charset") == 1, r.headers["Content-Type"]


def test_a_real_node_sends_the_pointer_allow_and_one_charset(node_process: NodeProcess) -> None:
    """The same answers through the node's own HTTP server, not only Flask's test client."""
    url = node_process.url
    r = requests.get(f"{url}/v1/topic/t/messages", timeout=10)
    assert r.status_code == 404 and r.json()["api"] == "/openapi.json"
    r = requests.delete(f"{url}/v1/topics/t/messages", timeout=10)
    assert r.status_code == 405 and "POST" in r.headers["Allow"]
    r = requests.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].count("charset") == 1, r.headers
