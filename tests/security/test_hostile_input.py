"""Hostile input stops only its sender: poison bodies, NUL bytes, odd digits, deep JSON, HEAD, outages.

Each case is one that an outside attack found answered with a 500, a blocked partition, or a
failure of other clients' requests.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from broker.app import create_app
from broker.appender import Appender
from broker.envelope import NewMessage
from broker.errors import BadRequest
from broker.store.sql import Store, normalize_url
from broker.strict_json import MAX_JSON_DEPTH
from tests.support import own_database, wait_until, worker_name

from .conftest import CON, PUB, bearer

POISON_JSON_BODIES = {
    "brackets": b"[" * 50_000 + b"]" * 50_000,
    "deep": b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
    "lone_surrogate": b'"\\ud800"',
    "lone_surrogate_bytes": b'["\xed\xa0\x80"]',  # json.loads(bytes) would let it through
    "utf16": '"x"'.encode("utf-16"),
    "nan": b"[NaN, Infinity, 1e999]",
    "not_json": b"{oops",
}


@pytest.fixture
def node_app(database_url: str, tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path), "database_url": database_url})
    yield app
    app.extensions["toymb"].stop()


def _pull(client: FlaskClient, topic: str) -> str:
    r = client.post(f"/v1/topics/{topic}/groups/g/subscribers", json={"mode": "pull", "start": "earliest"})
    assert r.status_code == 201, r.get_data(as_text=True)
    return str(r.get_json()["subscriber_id"])


@pytest.mark.parametrize("name", sorted(POISON_JSON_BODIES))
def test_a_json_typed_base64_body_that_is_not_strict_json_is_refused_naming_the_field(
        client: FlaskClient, name: str) -> None:
    encoded = base64.b64encode(POISON_JSON_BODIES[name]).decode()
    r = client.post("/v1/topics/t/messages", json={"body_base64": encoded, "content_type": "application/json"})
    assert r.status_code == 400, r.get_data(as_text=True)
    assert r.get_json()["field"] == "body_base64"
    # The same bytes as an opaque type are fine, and come back byte for byte.
    r = client.post("/v1/topics/t/messages", json={"body_base64": encoded, "content_type": "application/x-raw"})
    assert r.status_code == 201


def test_poison_already_in_the_store_is_delivered_as_base64_and_does_not_hold_back_the_rest(
        app: Flask, client: FlaskClient) -> None:
    """Rows that skipped the door (an ingress, an older version) still render, and the partition moves."""
    node = app.extensions["toymb"]
    topic = node.topic("poisoned", create=True, partitions=1)
    sid = _pull(client, "poisoned")
    messages = [NewMessage(f"ok-{i}", "k", {}, "application/json", b'{"n": %d}' % i) for i in range(2)]
    messages[1:1] = [NewMessage(f"bad-{name}", "k", {}, "application/json", raw)
                     for name, raw in sorted(POISON_JSON_BODIES.items())]
    node.appender.append(topic, messages)
    r = client.get(f"/v1/topics/poisoned/groups/g/messages?subscriber={sid}&max=100")
    assert r.status_code == 200
    got = json.loads(r.get_data())  # strict: NaN or a lone surrogate would not be JSON
    by_id = {m["id"]: m for m in got["messages"]}
    assert [m["id"] for m in got["messages"]] == [m.id for m in messages]
    assert by_id["ok-0"]["body"] == {"n": 0} and by_id["ok-1"]["body"] == {"n": 1}
    for name, raw in POISON_JSON_BODIES.items():
        assert base64.b64decode(by_id[f"bad-{name}"]["body_base64"]) == raw


@pytest.mark.parametrize("field", ["id", "key", "content_type", "header name", "header value"])
def test_a_nul_character_is_a_400_naming_the_field(node_app: Flask, field: str) -> None:
    message: dict[str, Any] = {"id": "m1", "key": "k", "content_type": "text/plain", "body": "x",
                               "headers": {"h": "v"}}
    if field == "header name":
        message["headers"] = {"h\u0000": "v"}
    elif field == "header value":
        message["headers"] = {"h": "v\u0000"}
    else:
        message[field] = "a\u0000b"
    r = node_app.test_client().post("/v1/topics/t/messages", json=message)
    assert r.status_code == 400, r.get_data(as_text=True)
    assert "NUL" in r.get_json()["message"]


def test_a_body_at_the_size_limit_and_four_byte_utf8_fields_come_back_exactly(node_app: Flask) -> None:
    """MariaDB's defaults would cut or refuse these: BLOB holds 64 KiB, "utf8" stops at three bytes,
    and its usual collations make "A" and "a " the same id. Every store gives them back as sent."""
    client = node_app.test_client()
    limit = node_app.extensions["toymb"].settings.max_body
    body = bytes(range(256)) * (limit // 256) + bytes(limit % 256)
    assert len(body) == limit
    emoji = "\U0001F600\U0001F9EA\u00e9\u4e2d"
    sent = [
        {"id": emoji * 64, "key": "k" + emoji, "content_type": "application/octet-stream",
         "body_base64": base64.b64encode(body).decode(), "headers": {"h" + emoji: "v" + emoji * 2000}},
        {"id": "a", "key": emoji, "body": "lower"},
        {"id": "A", "key": emoji, "body": "upper"},
        {"id": "a ", "key": emoji, "body": "trailing space"},
    ]
    for message in sent:
        r = client.post("/v1/topics/exact/messages", json=message)
        assert r.status_code == 201, r.get_data(as_text=True)[:300]
    too_big = client.post("/v1/topics/exact/messages", json={
        "body_base64": base64.b64encode(body + b"x").decode(), "content_type": "application/octet-stream"})
    assert too_big.status_code == 413, too_big.get_data(as_text=True)[:300]
    sid = _pull(client, "exact")
    got: dict[str, Any] = {}
    for _ in range(10):
        r = client.get(f"/v1/topics/exact/groups/g/messages?subscriber={sid}&max=10")
        assert r.status_code == 200
        got.update({m["id"]: m for m in r.get_json()["messages"]})
        if len(got) == len(sent):
            break
    assert sorted(got) == sorted(m["id"] for m in sent)
    first = got[emoji * 64]
    assert base64.b64decode(first["body_base64"]) == body
    assert first["key"] == "k" + emoji and first["headers"] == {"h" + emoji: "v" + emoji * 2000}
    assert [got[i]["body"] for i in ("a", "A", "a ")] == ["lower", "upper", "trailing space"]


def test_a_nul_through_sendmessage_is_a_400(node_app: Flask) -> None:
    r = node_app.test_client().post("/sendmessage", json={"topicName": "t", "key": "a\u0000", "body": "x"})
    assert r.status_code == 400, r.get_data(as_text=True)


# What each database refuses that validation would have caught: PostgreSQL a NUL in text, MariaDB
# (which stores NUL) an id longer than its column.
REFUSED_IDS = {"pg_url": "evil\u0000", "mariadb_url": "evil" + "!" * 256}


@pytest.mark.parametrize("server", sorted(REFUSED_IDS))
def test_one_request_the_store_refuses_does_not_fail_the_others_in_its_group_commit(
        request: pytest.FixtureRequest, server: str) -> None:
    """A row that got past validation and that the database refuses fails only its own request."""
    store = Store(request.getfixturevalue(server))
    store.create_schema()
    topic, _ = store.ensure_topic("shared", 4)
    appender = Appender(store)
    outcomes: dict[str, Any] = {}

    def publish(msg_id: str) -> None:
        try:
            outcomes[msg_id] = appender.append(topic, [NewMessage(msg_id, None, {}, "text/plain", b"x")])
        except Exception as exc:  # noqa: BLE001 - recorded and asserted on below
            outcomes[msg_id] = exc

    evil = REFUSED_IDS[server]
    ids = [f"honest-{i}" for i in range(6)] + [evil]
    threads = [threading.Thread(target=publish, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    # Queued before the writer runs: all seven requests are drained into one group commit.
    while appender._queue.qsize() < len(ids):
        threading.Event().wait(0.01)
    appender.start()
    for thread in threads:
        thread.join(30)
    appender.stop()
    assert isinstance(outcomes[evil], BadRequest)
    for msg_id in ids[:-1]:
        assert not isinstance(outcomes[msg_id], Exception), outcomes[msg_id]
    assert store.count_messages() == 6
    store.dispose()


@pytest.mark.parametrize("path", ["/sendmessage", "/subscribe", "/advertise", "/v1/topics/t/messages"])
def test_json_nested_100000_deep_is_a_400(client: FlaskClient, path: str) -> None:
    r = client.post(path, data=b"[" * 100_000 + b"]" * 100_000, content_type="application/json")
    assert r.status_code == 400, r.get_data(as_text=True)
    assert r.get_json()["error"] == "bad_json"


@pytest.mark.parametrize("method,path", [("POST", "/v1/topics//messages"), ("GET", "/v1/topics//messages"),
                                         ("POST", "/v1/topics/t//messages"), ("GET", "/v1//topics")])
def test_an_empty_path_segment_is_a_json_404_not_a_redirect_to_another_resource(
        client: FlaskClient, method: str, path: str) -> None:
    """Werkzeug merged "//" and redirected (an HTML 308): an empty topic went to the topic "messages"."""
    r = client.open(path, method=method, json={"messages": [{"value": "x"}]})
    assert r.status_code == 404, r.get_data(as_text=True)
    assert r.get_json()["error"] == "not_found"
    assert "Location" not in r.headers
    assert client.get("/v1/topics").get_json()["topics"] == []


@pytest.mark.parametrize("partition", ["\u00b2", "\u0663", "1" * 5000, " 3", "3_0", "-1", "100"])
def test_only_ascii_digit_partitions_of_the_topic_are_committed(client: FlaskClient, partition: str) -> None:
    sid = _pull(client, "digits")
    r = client.post("/v1/topics/digits/groups/g/offsets", json={"subscriber": sid, "offsets": {partition: 0}})
    assert r.status_code == 400, r.get_data(as_text=True)
    assert r.get_json()["error"] == "bad_offsets"


@pytest.mark.parametrize("value", ["\u0663", "1" * 5000, "3_0", " 3"])
def test_query_numbers_are_ascii_digits(client: FlaskClient, value: str) -> None:
    sid = _pull(client, "digits")
    r = client.get(f"/v1/topics/digits/groups/g/messages?subscriber={sid}&max={value}")
    assert r.status_code == 400, r.get_data(as_text=True)
    assert r.get_json()["parameter"] == "max"


def test_a_subscriber_id_with_a_trailing_newline_is_refused(node_app: Flask) -> None:
    client = node_app.test_client()
    for sid in ("victim\n", "v" * 200 + "\n"):
        r = client.post("/v1/topics/t/groups/g/subscribers", json={"mode": "pull", "id": sid})
        assert r.status_code == 400, r.get_data(as_text=True)
        assert r.get_json()["error"] == "bad_subscriber_id"


def test_head_on_a_fetch_is_refused_and_moves_nothing(client: FlaskClient) -> None:
    sid = _pull(client, "heads")
    client.post("/v1/topics/heads/messages", json={"id": "m", "key": "k", "body": 1})
    for path in (f"/v1/topics/heads/groups/g/messages?subscriber={sid}", f"/poll/{sid}"):
        r = client.head(path)
        assert r.status_code == 405 and r.headers["Allow"] == "GET"
    r = client.get(f"/v1/topics/heads/groups/g/messages?subscriber={sid}")
    assert [m["id"] for m in r.get_json()["messages"]] == ["m"]


def test_a_consume_token_cannot_create_a_topic_by_subscribing(secure: FlaskClient) -> None:
    for path, body in (("/v1/topics/orders.new/groups/g/subscribers", {"mode": "pull"}),
                       ("/subscribe", {"topicName": "orders.new", "groupName": "g", "type": "pull"})):
        r = secure.post(path, json=body, headers=bearer(CON))
        assert r.status_code == 404, r.get_data(as_text=True)
        assert r.get_json()["error"] == "topic_not_found"
    assert secure.get("/v1/topics/orders.new", headers=bearer(PUB)).status_code == 404
    assert secure.put("/v1/topics/orders.new", json={}, headers=bearer(PUB)).status_code in (200, 201)
    r = secure.post("/v1/topics/orders.new/groups/g/subscribers", json={"mode": "pull"}, headers=bearer(CON))
    assert r.status_code == 201


@contextmanager
def _pg_outage(server_url: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """A database of its own on ``server_url``'s PostgreSQL, and how to refuse its connections."""
    database = worker_name("toymb_outage")
    url = own_database(server_url, database)
    admin = create_engine(make_url(normalize_url(server_url)), isolation_level="AUTOCOMMIT")

    def cut() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                         {"d": database})
    try:
        yield url, cut
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()


@contextmanager
def _mariadb_outage(server_url: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """A database and a user of their own on ``server_url``'s MariaDB, and how to cut the user off
    (its account locked, its connections killed)."""
    database = user = worker_name("toymb_outage")
    url = make_url(own_database(server_url, database)).set(username=user)
    admin = create_engine(make_url(normalize_url(server_url)), isolation_level="AUTOCOMMIT")
    account = f"'{user}'@'127.0.0.1'"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE USER IF NOT EXISTS {account}"))
        conn.execute(text(f"GRANT ALL PRIVILEGES ON `{database}`.* TO {account}"))
        conn.execute(text(f"ALTER USER {account} ACCOUNT UNLOCK"))

    def cut() -> None:
        with admin.connect() as conn:
            conn.execute(text(f"ALTER USER {account} ACCOUNT LOCK"))
            for (pid,) in conn.execute(text("SELECT id FROM information_schema.processlist WHERE user = :u"),
                                       {"u": user}).all():
                conn.execute(text(f"KILL CONNECTION {int(pid)}"))
    try:
        yield url.render_as_string(hide_password=False), cut
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"ALTER USER {account} ACCOUNT UNLOCK"))
        admin.dispose()


@pytest.mark.parametrize("server", ["pg_url", "mariadb_url"])
def test_a_store_outage_is_a_503_with_retry_after(request: pytest.FixtureRequest, server: str,
                                                  tmp_path: Path) -> None:
    """The node's database refuses connections (as in an outage) while the node runs."""
    outage = _pg_outage if server == "pg_url" else _mariadb_outage
    with outage(request.getfixturevalue(server)) as (url, cut):
        app = create_app({"data_dir": str(tmp_path), "database_url": url})
        client = app.test_client()
        try:
            sid = _pull(client, "t")
            cut()
            for method, path in (("GET", "/v1/topics"), ("GET", "/v1/topics/t"),
                                 ("POST", f"/v1/subscribers/{sid}/heartbeat"),
                                 ("GET", f"/v1/topics/t/groups/g/messages?subscriber={sid}"),
                                 ("GET", "/v1/topics/t/groups/g")):
                r = client.open(path, method=method)
                assert r.status_code == 503, (method, path, r.status_code, r.get_data(as_text=True))
                assert r.headers["Retry-After"] == "1" and r.get_json()["error"] in ("unavailable", "not_owner")
        finally:
            app.extensions["toymb"].stop()


def test_a_lone_surrogate_stored_as_bytes_is_pushed_as_base64_and_the_partition_moves(tmp_path: Path) -> None:
    """The push body is UTF-8: a stored row that would render a lone surrogate must not block it."""
    from tests.delivery.conftest import STEADY_LEASE_MS
    from tests.delivery.support import LiveNode, Receiver

    live, receiver = LiveNode(tmp_path, subscriber_lease_ms=STEADY_LEASE_MS), Receiver()
    try:
        node = live.node
        topic = node.topic("cesu", create=True, partitions=1)
        live.subscribe("cesu", "g", mode="push", url=receiver.url, start="earliest")
        node.appender.append(topic, [NewMessage("bad", "k", {}, "application/json", b'["\xed\xa0\x80"]'),
                                     NewMessage("ok", "k", {}, "application/json", b'{"n": 1}')])
        wait_until(lambda: len(receiver.messages()) >= 2, timeout=30, what="both messages pushed")
        got = {m["id"]: m for m in receiver.messages()}
        assert base64.b64decode(got["bad"]["body_base64"]) == b'["\xed\xa0\x80"]'
        assert got["ok"]["body"] == {"n": 1}
    finally:
        receiver.stop()
        live.close()
