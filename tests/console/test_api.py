"""The console's HTTP side on an in-process node: security, settings, hostile input and hostile peers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from broker.app import create_app
from broker.config import load
from broker.console.progress import ProgressTracker
from broker.errors import ConfigError
from journal_spark.metrics import JournalMetrics
from tests.console.bridges import management_server
from tests.driver.helpers import serve
from tests.support import free_port

ADMIN, READER, ORDERS_READER, PUBLISHER = "adm", "rd", "rd-orders", "pub"
TOKENS = (f"{ADMIN}=admin", f"{READER}=consume", f"{ORDERS_READER}=consume@orders*", f"{PUBLISHER}=publish")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def node(tmp_path: Path, **settings: Any) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path), "tokens": TOKENS, **settings})
    try:
        yield app
    finally:
        app.extensions["toymb"].stop()


@contextmanager
def http_peer(handle: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """A real HTTP server on loopback whose every request ``handle`` answers (a hostile peer)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def do_POST(self) -> None:
            handle(self)

        def log_message(self, *_args: Any) -> None:
            pass

    with serve(Handler) as url:
        yield url


def answer(status: int, body: bytes, ctype: str = "application/json") -> Callable[[BaseHTTPRequestHandler], None]:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            h.wfile.write(body)
        except BrokenPipeError:
            pass  # the node gave up reading (a size cap or a timeout): what is being tested

    return handle


def test_page_is_open_with_a_strict_policy_and_data_needs_consume_or_admin(tmp_path: Path) -> None:
    with node(tmp_path) as app:
        c = app.test_client()
        page = c.get("/console")
        assert page.status_code == 200 and b'src="/console/console.js"' in page.data
        policy = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "unsafe" not in policy
        assert b"<script>" not in page.data and b"style=" not in page.data   # nothing inline
        assert c.get("/console/console.js").status_code == 200
        assert c.get("/console/console.css").mimetype == "text/css"
        assert c.get("/console/../broker/config.py").status_code in (401, 404)  # only the two files
        assert c.get("/console/api/overview").status_code == 401
        assert c.get("/console/api/overview", headers=bearer("wrong")).status_code == 401
        assert c.get("/console/api/overview", headers=bearer(PUBLISHER)).status_code == 403
        for token in (READER, ADMIN):
            assert c.get("/console/api/overview", headers=bearer(token)).status_code == 200
        # Actions need admin; a consume token is refused before anything is relayed.
        action = {"endpoint": "jms", "bridge": "b", "action": "pause"}
        assert c.post("/console/api/bridges/action", json=action, headers=bearer(READER)).status_code == 403
        assert c.post("/console/api/bridges/action", json=action).status_code == 401


def test_a_token_limited_to_some_topics_sees_only_those(tmp_path: Path) -> None:
    with node(tmp_path) as app:
        c = app.test_client()
        for topic in ("orders", "payments"):
            assert c.post(f"/v1/topics/{topic}/messages", json={"body": 1}, headers=bearer(ADMIN)).status_code == 201
            c.post(f"/v1/topics/{topic}/groups/g/subscribers", json={"mode": "pull", "start": "earliest"},
                   headers=bearer(ADMIN))
        whole = c.get("/console/api/overview", headers=bearer(READER)).json
        assert {t["name"] for t in whole["topics"]} == {"orders", "payments"}
        assert whole["journal"]["lag"] == 2
        part = c.get("/console/api/overview", headers=bearer(ORDERS_READER)).json
        assert [t["name"] for t in part["topics"]] == ["orders"]
        assert [g["topic"] for g in part["groups"]] == ["orders"]
        assert [r["topic"] for r in part["journal"]["topics"]] == ["orders"] and part["journal"]["lag"] == 1


def test_refresh_setting_reaches_the_page_and_bad_console_settings_stop_startup(tmp_path: Path) -> None:
    with node(tmp_path, console_refresh_ms=750) as app:
        assert app.test_client().get("/console/api/overview", headers=bearer(ADMIN)).json["refresh_ms"] == 750
    for bad in ({"console_refresh_ms": "100"}, {"console_bridges": "no-equals-sign"},
                {"console_bridges": "a=ftp://x"}, {"console_bridges": "a=http://x,a=http://y"},
                {"console_bridges": "bad name=http://x"}, {"console_journal_metrics": "file:///etc/passwd"}):
        with pytest.raises(ConfigError):
            load(env={}, overrides=bad)


def test_bridges_are_shown_and_paused_only_at_configured_addresses(tmp_path: Path) -> None:
    with management_server("jms-in") as (url, bridges), node(tmp_path, console_bridges=(f"jms={url}",)) as app:
        c = app.test_client()
        shown = c.get("/console/api/overview", headers=bearer(READER)).json["bridges"]
        assert shown == [{"endpoint": "jms", "url": url, "reachable": True,
                          "error": None, "bridges": [{"name": "jms-in", "kind": "jms-ingress",
                                                      "state": "STARTED", "last_error": None,
                                                      "counts": {"message_count": 3}}]}]

        def act(**body: Any) -> Any:
            return c.post("/console/api/bridges/action", json=body, headers=bearer(ADMIN))

        paused = act(endpoint="jms", bridge="jms-in", action="pause")
        assert paused.status_code == 200 and paused.json["state"] == "PAUSED"
        assert bridges["jms-in"].state == "PAUSED"
        overview = c.get("/console/api/overview", headers=bearer(READER)).json
        assert overview["bridges"][0]["bridges"][0]["state"] == "PAUSED"   # the cache was dropped
        assert act(endpoint="jms", bridge="jms-in", action="resume").json["state"] == "STARTED"
        # Only configured endpoints, only pause and resume, only well-formed names: never another URL.
        assert act(endpoint="http://127.0.0.1:1", bridge="jms-in", action="pause").status_code == 404
        assert act(endpoint="jms", bridge="jms-in", action="stop").status_code == 400
        assert bridges["jms-in"].state == "STARTED"
        assert act(endpoint="jms", bridge="../metrics", action="pause").status_code == 400
        assert act(endpoint="jms", bridge="nope", action="pause").status_code == 404
        assert act(endpoint="jms", bridge="jms-in", action="pause", url="http://evil").status_code == 400
        assert act(endpoint="jms", bridge=["x"], action="pause").status_code == 400
        for raw in (b"", b"{", b"[]", b"\xff\xfe", b"{" * 5000 + b"}" * 5000):
            bad = c.post("/console/api/bridges/action", data=raw, content_type="application/json",
                         headers=bearer(ADMIN))
            assert bad.status_code == 400, raw[:20]


def test_hostile_bridges_and_journal_peers_never_break_the_overview(tmp_path: Path) -> None:
    huge = json.dumps({"bridges": [{"name": "b", "state": "S" * 100, "x": 1}] * 40000}).encode()
    deep = b"[" * 100000 + b"]" * 100000
    odd = json.dumps({"bridges": [{"name": "<img src=x onerror=alert(1)>"}, {"name": 5}, "x", None,
                                  {"name": "ok", "state": {"nested": 1}, "counts": {"n": True, "m": 2},
                                   "last_error": "e" * 10000}]}).encode()

    released = threading.Event()

    def slow(h: BaseHTTPRequestHandler) -> None:
        released.wait(10)   # hangs until the test is over

    with http_peer(answer(200, huge)) as big, http_peer(answer(200, deep)) as nested, \
            http_peer(answer(200, odd)) as weird, http_peer(slow) as hanging, \
            http_peer(answer(200, b"not prometheus {{{", "text/plain")) as garbage_metrics, \
            http_peer(answer(500, b"oops")) as failing:
        endpoints = (f"big={big}", f"deep={nested}", f"weird={weird}", f"slow={hanging}", f"failing={failing}",
                     "dead=http://127.0.0.1:1")
        with node(tmp_path, console_bridges=endpoints, console_journal_metrics=garbage_metrics + "/metrics") as app:
            c = app.test_client()
            got = c.get("/console/api/overview", headers=bearer(READER))
            assert got.status_code == 200
            by_name = {e["endpoint"]: e for e in got.json["bridges"]}
            assert "more than" in by_name["big"]["error"]
            assert "not JSON" in by_name["deep"]["error"]
            assert [b["name"] for b in by_name["weird"]["bridges"]] == ["ok"]   # the rest is dropped
            ok = by_name["weird"]["bridges"][0]
            assert ok["state"] == "UNKNOWN" and ok["counts"] == {"m": 2} and len(ok["last_error"]) == 500
            assert by_name["slow"]["reachable"] is False and "unreachable" in by_name["slow"]["error"]
            assert by_name["failing"]["error"] == "answered 500 with a body that is not JSON"
            assert by_name["dead"]["reachable"] is False
            assert "do not parse" in got.json["journal"]["health"]["error"]
            refused = c.post("/console/api/bridges/action", json={"endpoint": "dead", "bridge": "b",
                                                                   "action": "pause"}, headers=bearer(ADMIN))
            assert refused.status_code == 503 and refused.json["error"] == "bridge_unavailable"
        released.set()


def test_journal_health_from_the_journal_jobs_metrics_server(tmp_path: Path) -> None:
    metrics = JournalMetrics()
    metrics.rows.inc(42)
    metrics.batches.labels("parquet", "written").inc(3)
    metrics.batch_seconds.labels("parquet").observe(0.5)
    port = metrics.serve("127.0.0.1", free_port())
    try:
        with node(tmp_path, console_journal_metrics=f"http://127.0.0.1:{port}/metrics") as app:
            health = app.test_client().get("/console/api/overview", headers=bearer(READER)).json["journal"]["health"]
            assert health["reachable"] and health["error"] is None
            assert health["rows"] == 42 and health["batches"] == {"written": 3} and health["mean_batch_s"] == 0.5
    finally:
        metrics.close()


def test_stuck_means_lag_without_progress_for_a_while() -> None:
    tracker = ProgressTracker(stuck_after_ms=1000, max_tracked=3)
    group = ("t", "g")
    assert tracker.observe(group, {0: (5, 8)}, now_ms=0) == {}                  # first look: nothing known
    assert tracker.observe(group, {0: (5, 9)}, now_ms=999) == {0: (999, True)}
    assert not tracker.is_stuck(999)
    idle, grew = tracker.observe(group, {0: (5, 14)}, now_ms=1000)[0]
    assert tracker.is_stuck(idle) and grew
    assert tracker.observe(group, {0: (6, 14)}, now_ms=1500) == {}              # progress resets it
    assert tracker.observe(group, {}, now_ms=5000) == {} and len(tracker) == 0  # caught up: forgotten
    tracker.observe(group, {p: (0, 1) for p in range(5)}, now_ms=0)            # the cap holds
    assert len(tracker) == 3
    tracker.observe(("t", "h"), {0: (0, 1)}, now_ms=0)
    tracker.forget_except({("t", "h")})
    assert len(tracker) == 0
