"""Every role and topic-scope decision, endpoint by endpoint, on an in-process node with tokens.

Tokens (see conftest): PUB publish@orders.*, CON consume@orders.*, BOTH publish+consume@orders.a,
ADM admin. Topic ``orders.a`` is inside the scoped tokens' patterns, ``secret`` is outside.
A request that passes authorization may still fail in its handler (404, 400, ...), but never
with 401 or 403.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from .conftest import ADM, BOTH, CLUSTER, CON, PUB, bearer

IN, OUT = "orders.a", "secret"

# (method, path, JSON body, role the endpoint needs). {t} is the topic, {sid} a subscriber of it.
ENDPOINTS: list[tuple[str, str, Any, str]] = [
    ("POST", "/v1/topics/{t}/messages", {"body": {"n": 1}}, "publish"),
    ("PUT", "/v1/topics/{t}", {"partitions": 4}, "publish"),
    ("POST", "/sendmessage", {"topicName": "{t}", "key": "k", "body": "hello"}, "publish"),
    ("POST", "/advertise", {"topicName": "{t}", "partitions": 4}, "publish"),
    ("GET", "/v1/topics/{t}", None, "any"),
    ("POST", "/v1/topics/{t}/groups/g/subscribers", {"mode": "pull"}, "consume"),
    ("DELETE", "/v1/topics/{t}/groups/g/subscribers/no-such-sub", None, "consume"),
    ("GET", "/v1/topics/{t}/groups/g/messages?subscriber={sid}&wait_ms=0", None, "consume"),
    ("POST", "/v1/topics/{t}/groups/g/offsets", {"subscriber": "{sid}", "offsets": {"0": 0}}, "consume"),
    ("GET", "/v1/topics/{t}/groups/g", None, "consume"),
    ("POST", "/subscribe", {"topicName": "{t}", "groupName": "g2", "type": "pull"}, "consume"),
    ("POST", "/v1/subscribers/{sid}/heartbeat", None, "consume"),
    ("GET", "/poll/{sid}", None, "consume"),
    ("POST", "/v1/topics/{t}/groups/g/seek", {"to": "earliest"}, "admin"),
    ("POST", "/v1/topics/{t}/groups/g/nack", {"subscriber": "{sid}", "messages": [{"partition": 0, "offset": 0}]},
     "consume"),
    ("POST", "/v1/topics/{t}/groups/g/extend", {"subscriber": "{sid}", "messages": [{"partition": 0, "offset": 0}]},
     "consume"),
    ("POST", "/v1/topics/{t}/groups/g/subscribers/{sid}/secret", {}, "consume"),
]

# Written out rather than computed, so the table is the specification:
# does TOKEN get ROLE on orders.a? (On "secret" only ADM does.)
ALLOWED_IN_SCOPE = {
    (PUB, "publish"): True,
    (PUB, "consume"): False,
    (PUB, "any"): True,
    (CON, "publish"): False,
    (CON, "consume"): True,
    (CON, "any"): True,
    (BOTH, "publish"): True,
    (BOTH, "consume"): True,
    (BOTH, "any"): True,
    (ADM, "publish"): True,
    (ADM, "consume"): True,
    (ADM, "any"): True,
    (PUB, "admin"): False,
    (CON, "admin"): False,
    (BOTH, "admin"): False,
    (ADM, "admin"): True,
}


@pytest.fixture
def subs(secure_app: Flask) -> dict[str, str]:
    """A pull subscriber on each topic, registered by the admin, for the subscriber-id endpoints."""
    client = secure_app.test_client()
    out = {}
    for topic in (IN, OUT):
        assert (
            client.put(f"/v1/topics/{topic}", json={"partitions": 4}, headers=bearer(ADM)).status_code == 201
        )
        answer = client.post(
            f"/v1/topics/{topic}/groups/g/subscribers", json={"mode": "pull"}, headers=bearer(ADM)
        )
        assert answer.status_code == 201, answer.json
        out[topic] = answer.json["subscriber_id"]
    return out


def _fill(value: Any, topic: str, sid: str) -> Any:
    if isinstance(value, str):
        return value.replace("{t}", topic).replace("{sid}", sid)
    if isinstance(value, dict):
        return {k: _fill(v, topic, sid) for k, v in value.items()}
    return value


def call(
    client: FlaskClient,
    method: str,
    path: str,
    body: Any,
    topic: str,
    sid: str,
    headers: dict[str, str] | None = None,
) -> Any:
    kwargs: dict[str, Any] = {"headers": headers or {}}
    if body is not None:
        kwargs["json"] = _fill(body, topic, sid)
    return client.open(_fill(path, topic, sid), method=method, **kwargs)


@pytest.mark.parametrize("method, path, body, role", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
@pytest.mark.parametrize("token", [PUB, CON, BOTH, ADM], ids=["pub", "con", "both", "admin"])
@pytest.mark.parametrize("topic", [IN, OUT])
def test_role_and_topic_decisions(
    secure: FlaskClient,
    subs: dict[str, str],
    method: str,
    path: str,
    body: Any,
    role: str,
    token: str,
    topic: str,
) -> None:
    answer = call(secure, method, path, body, topic, subs[topic], bearer(token))
    allowed = token == ADM or (topic == IN and ALLOWED_IN_SCOPE[(token, role)])
    if token == BOTH and topic == IN and role != "admin":
        assert allowed  # BOTH covers orders.a exactly (but is no admin)
    if allowed:
        assert answer.status_code not in (401, 403), answer.json
        assert answer.status_code < 500
    else:
        assert answer.status_code == 403, answer.data
        assert answer.json["error"] == "forbidden"
        assert answer.json["role"] == role and answer.json["topic"] == topic
        assert token not in answer.get_data(as_text=True)


@pytest.mark.parametrize("method, path, body, role", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
@pytest.mark.parametrize(
    "auth",
    [None, "Bearer not-a-token", f"Basic {ADM}", "Bearer ", f"Bearer {ADM}x"],
    ids=["missing", "unknown", "basic", "empty", "suffixed"],
)
def test_no_or_bad_token_is_401(
    secure: FlaskClient, subs: dict[str, str], method: str, path: str, body: Any, role: str, auth: str | None
) -> None:
    answer = call(secure, method, path, body, IN, subs[IN], {"Authorization": auth} if auth else {})
    assert answer.status_code == 401, answer.data
    assert answer.json["error"] == "unauthorized"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/cluster"])
@pytest.mark.parametrize("token", [PUB, CON, BOTH, ADM])
def test_listings_need_any_valid_token(secure: FlaskClient, path: str, token: str) -> None:
    assert secure.get(path, headers=bearer(token)).status_code == 200
    assert secure.get(path).status_code == 401


@pytest.mark.parametrize("token, status", [(PUB, 403), (CON, 403), (BOTH, 403), (ADM, 200)])
def test_metrics_need_admin(secure: FlaskClient, token: str, status: int) -> None:
    answer = secure.get("/metrics", headers=bearer(token))
    assert answer.status_code == status
    if status == 403:
        assert answer.json["role"] == "admin"


@pytest.mark.parametrize("path", ["/health", "/ready", "/openapi.json"])
def test_open_endpoints_need_no_token(secure: FlaskClient, path: str) -> None:
    assert secure.get(path).status_code == 200
    assert secure.get(path, environ_base={"REMOTE_ADDR": "10.1.2.3"}).status_code == 200


def test_unlisted_paths_need_admin(secure: FlaskClient) -> None:
    assert secure.get("/v1/internal/whatever").status_code == 401
    assert secure.get("/v1/internal/whatever", headers=bearer(PUB)).status_code == 403
    assert secure.get("/v1/internal/whatever", headers=bearer(ADM)).status_code == 404


def test_refusals_are_counted(secure: FlaskClient) -> None:
    secure.get("/v1/topics")
    secure.post("/v1/topics/secret/messages", json={"body": 1}, headers=bearer(PUB))
    text = secure.get("/metrics", headers=bearer(ADM)).get_data(as_text=True)
    assert 'toymb_auth_failures_total{status="401"} 1.0' in text
    assert 'toymb_auth_failures_total{status="403"} 1.0' in text


class TestClusterToken:
    def test_a_peer_without_authorization_acts_as_admin(self, secure: FlaskClient) -> None:
        headers = {"X-ToyMB-Cluster-Token": CLUSTER}
        assert secure.get("/metrics", headers=headers).status_code == 200
        answer = secure.post(
            "/v1/topics/secret/messages",
            json={"body": 1},
            headers=headers,
            environ_base={"REMOTE_ADDR": "10.9.9.9"},
        )
        assert answer.status_code == 201

    def test_forwarding_never_widens_a_clients_rights(self, secure: FlaskClient) -> None:
        headers = {"X-ToyMB-Cluster-Token": CLUSTER, **bearer(CON)}
        answer = secure.post("/v1/topics/orders.a/messages", json={"body": 1}, headers=headers)
        assert answer.status_code == 403 and answer.json["role"] == "publish"
        headers = {"X-ToyMB-Cluster-Token": CLUSTER, **bearer("forged")}
        assert (
            secure.post("/v1/topics/orders.a/messages", json={"body": 1}, headers=headers).status_code == 401
        )

    @pytest.mark.parametrize("value", ["wrong", CLUSTER + "x", "", ADM])
    def test_a_wrong_cluster_token_is_401_even_with_a_good_bearer(
        self, secure: FlaskClient, value: str
    ) -> None:
        headers = {"X-ToyMB-Cluster-Token": value, **bearer(ADM)}
        assert secure.get("/v1/topics", headers=headers).status_code == 401


def test_a_store_error_while_authorizing_refuses_with_503_and_is_logged(
    secure_app: Flask, subs: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The subscriber's topic cannot be read: refuse (closed), never treat it as a topic-less request."""
    with closing(sqlite3.connect(tmp_path / "toymb.db")) as db:
        db.execute("ALTER TABLE toymb_subscribers RENAME TO toymb_subscribers_away")
        db.commit()
    client = secure_app.test_client()
    with caplog.at_level(logging.WARNING, logger="broker.security.authz"):
        answer = client.post(f"/v1/subscribers/{subs[IN]}/heartbeat", headers=bearer(CON))
    assert answer.status_code == 503, answer.json
    assert answer.json["error"] == "unavailable" and answer.headers["Retry-After"]
    refusals = [r.getMessage() for r in caplog.records if r.name == "broker.security.authz"]
    assert refusals and subs[IN] in refusals[0], caplog.text
