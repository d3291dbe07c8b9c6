"""The publish fast path answers exactly as Flask would: same status, same error body, same refusals.

``app.wsgi_app`` is the fast path in front of Flask; ``app.wsgi_app.app`` is Flask's own WSGI
app. Every request below goes through both, on the same started node, and the answers must be
the same (for a stored message: the same status and fields; the offsets differ, as the second
request stores a second message).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.datastructures import EnvironHeaders

from broker.api.fast_publish import EnvironHeaderView, PublishFastPath
from broker.app import create_app
from tests.security.conftest import ADM, BOTH, CLUSTER, CON, PUB, TOKENS

Answer = tuple[int, dict[str, str], Any]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path_factory.mktemp("fast")), "tokens": TOKENS, "cluster_token": CLUSTER,
                      "max_batch": 5, "max_body": 64, "max_request": 4096})
    yield app
    app.extensions["toymb"].stop()


def call(wsgi: Any, body: bytes, *, path: str = "/v1/topics/orders.a/messages", token: str | None = PUB,
         remote: str = "127.0.0.1", length: str | None = None, extra: dict[str, str] | None = None) -> Answer:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8080", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": remote, "wsgi.url_scheme": "http",
        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)) if length is None else length,
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr, "wsgi.version": (1, 0),
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False, "SCRIPT_NAME": "",
        "HTTP_HOST": "127.0.0.1:8080", **(extra or {})}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen.append((int(status.split()[0]), {k.lower(): v for k, v in headers}))

    raw = b"".join(wsgi(environ, start_response))
    status, headers = seen[0]
    return status, headers, json.loads(raw)


def both(app: Flask, body: bytes, **kwargs: Any) -> tuple[Answer, Answer]:
    assert isinstance(app.wsgi_app, PublishFastPath)
    return call(app.wsgi_app, body, **kwargs), call(app.wsgi_app.app, body, **kwargs)


def message(**fields: Any) -> bytes:
    return json.dumps({"body": "hello", **fields}).encode()


REFUSED = [
    pytest.param(b"", id="empty body"),
    pytest.param(b"{", id="truncated JSON"),
    pytest.param(b"\xff\xfe", id="not UTF-8"),
    pytest.param(b"[" * 5000 + b"]" * 5000, id="deep nesting"),
    pytest.param(b'{"body": NaN}', id="NaN"),
    pytest.param(b'"just a string"', id="not an object"),
    pytest.param(message(colour="red"), id="unknown field"),
    pytest.param(message(key="a\u0000b"), id="NUL in key"),
    pytest.param(b'{"body": "x", "key": "\\ud800"}', id="lone surrogate"),
    pytest.param(message(body="x" * 65), id="body over max_body"),
    pytest.param(message(headers={"h": 1}), id="header not a string"),
    pytest.param(message(timestamp=-1), id="negative timestamp"),
    pytest.param(json.dumps({"messages": []}).encode(), id="empty batch"),
    pytest.param(json.dumps({"messages": [{"body": "x"}] * 6}).encode(), id="batch over max_batch"),
    pytest.param(json.dumps({"messages": [{"body": "x"}], "more": 1}).encode(), id="batch with extra field"),
]


@pytest.mark.parametrize("body", REFUSED)
def test_a_refused_body_gets_the_same_answer(app: Flask, body: bytes) -> None:
    fast, flask = both(app, body)
    assert fast == flask
    assert 400 <= fast[0] < 500


CALLERS = [
    pytest.param({"token": None}, id="no token"),
    pytest.param({"token": "not-a-token"}, id="unknown token"),
    pytest.param({"token": CON}, id="consume-only token"),
    pytest.param({"token": BOTH, "path": "/v1/topics/orders.b/messages"}, id="token for another topic"),
    pytest.param({"token": None, "extra": {"HTTP_X_TOYMB_CLUSTER_TOKEN": "wrong"}}, id="wrong cluster token"),
    pytest.param({"path": "/v1/topics/bad%20name/messages"}, id="bad topic name"),
    pytest.param({"path": "/v1/topics/" + "t" * 300 + "/messages"}, id="overlong topic name"),
    pytest.param({"length": "12"}, id="body shorter than Content-Length"),
    pytest.param({"length": "99999"}, id="Content-Length over max_request"),
]


@pytest.mark.parametrize("kwargs", CALLERS)
def test_a_refused_caller_gets_the_same_answer(app: Flask, kwargs: dict[str, Any]) -> None:
    fast, flask = both(app, message(), **kwargs)
    assert fast == flask
    assert fast[0] in (400, 401, 403, 413)
    if fast[0] == 401:
        assert fast[1]["www-authenticate"] == 'Bearer realm="toymb"'


@pytest.mark.parametrize("kwargs", [
    pytest.param({}, id="publisher token"),
    pytest.param({"token": ADM}, id="admin token"),
    pytest.param({"token": None, "extra": {"HTTP_X_TOYMB_CLUSTER_TOKEN": CLUSTER}}, id="peer node"),
])
def test_a_stored_message_gets_the_same_answer(app: Flask, kwargs: dict[str, Any]) -> None:
    fast, flask = both(app, message(key="k"), **kwargs)
    assert (fast[0], fast[1]["content-type"]) == (flask[0], flask[1]["content-type"]) == (201, "application/json")
    assert set(fast[2]) == set(flask[2]) == {"id", "topic", "partition", "offset", "duplicate"}
    assert fast[2]["partition"] == flask[2]["partition"]  # same key, same partition
    assert flask[2]["offset"] == fast[2]["offset"] + 1


@pytest.mark.parametrize("body", [
    pytest.param(b'{"body": "x", "body": "y", "key": "k"}', id="duplicate keys: the last wins"),
    pytest.param(b'{"body": 18446744073709551616123, "key": "k"}', id="integer beyond 64 bits"),
    pytest.param(b'{"body": {"deep": [[[["\\ud83d\\ude00"]]]]}, "key": "k"}', id="escaped surrogate pair"),
])
def test_an_odd_but_valid_body_is_stored_both_ways(app: Flask, body: bytes) -> None:
    fast, flask = both(app, body)
    assert fast[0] == flask[0] == 201
    assert fast[2]["partition"] == flask[2]["partition"]


def test_a_duplicate_and_a_batch_get_the_same_answers(app: Flask) -> None:
    once = message(id="fixed-id-1")
    first = call(app.wsgi_app, once)
    fast, flask = both(app, once)
    assert first[0] == 201 and fast == flask
    assert (fast[0], fast[2]) == (200, dict(first[2], duplicate=True))
    batch = json.dumps({"messages": [{"id": "fixed-id-1", "body": "a"}, {"body": "b", "key": "k"}]}).encode()
    fast, flask = both(app, batch)
    assert fast[0] == flask[0] == 201
    assert fast[2]["messages"][0] == flask[2]["messages"][0] == dict(first[2], duplicate=True)
    assert [m["duplicate"] for m in fast[2]["messages"]] == [True, False]


def test_the_fast_path_serves_a_publish_without_flask(app: Flask) -> None:
    """A publish this node owns never reaches Flask; anything else does."""
    node = app.extensions["toymb"]

    def not_flask(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("599 Flask", [("Content-Type", "application/json")])
        return [b'{"flask": true}']

    fast = PublishFastPath(not_flask, node, app.wsgi_app.authorizer, app.extensions["toymb.routes"])
    assert call(fast, message())[0] == 201
    assert call(fast, message(), token="nope")[0] == 599  # a refusal is answered by Flask
    assert call(fast, message(), path="/v1/topics/orders.a")[0] == 599  # another route
    assert call(fast, message(), length="")[0] == 599  # no Content-Length


@pytest.mark.parametrize("name", ["Authorization", "authorization", "X-ToyMB-Cluster-Token", "x-toymb-cluster-token",
                                  "X_TOYMB_CLUSTER_TOKEN", "Content-Type", "Content-Length", "Host", "Absent"])
def test_the_fast_paths_header_view_reads_what_werkzeug_reads(name: str) -> None:
    # The authorizer reads the fast path's requests through EnvironHeaderView and Flask's through
    # werkzeug's headers: one rule only if both read every header name alike.
    environ = {"HTTP_AUTHORIZATION": "Bearer x", "HTTP_X_TOYMB_CLUSTER_TOKEN": "c", "CONTENT_TYPE": "text/plain",
               "CONTENT_LENGTH": "12", "HTTP_CONTENT_TYPE": "wrong", "HTTP_HOST": "h"}
    assert EnvironHeaderView(environ).get(name) == EnvironHeaders(environ).get(name)
