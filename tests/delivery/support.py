"""Helpers of the delivery tests: real HTTP receivers, an in-process node on a real socket, heartbeats."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

from broker.app import create_app

# Small timings so retries, leases and redelivery happen within a test's patience.
FAST = {
    "push_backoff_ms": 20, "push_backoff_max_ms": 200, "push_max_attempts": 3, "push_timeout_ms": 2000,
    "subscriber_lease_ms": 2000, "redelivery_ms": 1500, "push_allow": ("127.0.0.0/8", "localhost"),
}
FAST_ENV = {
    "TOYMB_PUSH_BACKOFF_MS": "20", "TOYMB_PUSH_BACKOFF_MAX_MS": "200", "TOYMB_PUSH_MAX_ATTEMPTS": "3",
    "TOYMB_PUSH_TIMEOUT_MS": "2000", "TOYMB_SUBSCRIBER_LEASE_MS": "2000", "TOYMB_REDELIVERY_MS": "1500",
    "TOYMB_PUSH_ALLOW": "127.0.0.0/8,localhost",
}

Respond = Callable[[dict[str, Any]], int]


class Receiver:
    """A real HTTP server that records every push; ``respond(payload) -> status`` decides the answer."""

    def __init__(self, respond: Respond | None = None) -> None:
        self.respond = respond or (lambda _payload: 200)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []   # every payload received, acked or not
        self.acked: list[dict[str, Any]] = []      # payloads answered 2xx
        self.raw: list[tuple[dict[str, str], bytes]] = []  # every request's headers and body, as sent
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body go out as two writes

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                try:
                    payload = json.loads(data or b"null")
                except ValueError:  # an unwrapped or binary-mode push: the raw body
                    payload = {"raw": data}
                with receiver.lock:
                    receiver.requests.append(payload)
                    receiver.raw.append(({k.lower(): v for k, v in self.headers.items()}, data))
                status = receiver.respond(payload)
                if 200 <= status < 300:
                    with receiver.lock:
                        receiver.acked.append(payload)
                answer = b"ack" if self.path != "/receivemessage" else f"ack{payload['messageId']}".encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/push"

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def messages(self) -> list[dict[str, Any]]:
        """Envelopes of acknowledged pushes, in the order they arrived."""
        with self.lock:
            return [m for payload in self.acked for m in payload["messages"]]

    def attempts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [m for payload in self.requests for m in payload.get("messages", [])]

    def stop(self) -> None:
        """Close the socket: later pushes find nobody listening, as after a crash."""
        self.server.shutdown()
        self.server.server_close()


class LiveNode:
    """An in-process node served over a real loopback socket (werkzeug, threaded)."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        settings = {"data_dir": str(data_dir), **FAST, **overrides}
        self.app: Flask = create_app(settings)
        self.node = self.app.extensions["toymb"]
        self.server: BaseWSGIServer = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.http = requests.Session()

    def post(self, path: str, body: Any = None, **kw: Any) -> requests.Response:
        return self.http.post(self.url + path, json=body, timeout=30, **kw)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.http.get(self.url + path, timeout=30, **kw)

    def delete(self, path: str) -> requests.Response:
        return self.http.delete(self.url + path, timeout=30)

    def subscribe(self, topic: str, group: str, **body: Any) -> dict[str, Any]:
        resp = self.post(f"/v1/topics/{topic}/groups/{group}/subscribers", body)
        assert resp.status_code == 201, resp.text
        return dict(resp.json())

    def publish(self, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for start in range(0, len(messages), 500):
            resp = self.post(f"/v1/topics/{topic}/messages", {"messages": messages[start:start + 500]})
            assert resp.status_code in (200, 201), resp.text
            out.extend(resp.json()["messages"])
        return out

    def group(self, topic: str, group: str) -> dict[str, Any]:
        resp = self.get(f"/v1/topics/{topic}/groups/{group}")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.node.stop()


class Heartbeat:
    """Keeps a subscriber's lease alive from a thread, as a client library would, until stopped."""

    def __init__(self, base_url: str, sid: str, every_s: float = 0.3) -> None:
        self.url = f"{base_url}/v1/subscribers/{sid}/heartbeat"
        self.every_s = every_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with requests.Session() as http:
            while not self.stopped.wait(self.every_s):
                try:
                    http.post(self.url, timeout=5)
                except requests.RequestException:
                    pass

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def by_partition(envelopes: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Offsets received per partition, in arrival order."""
    out: dict[int, list[int]] = {}
    for env in envelopes:
        out.setdefault(env["partition"], []).append(env["offset"])
    return out


def first_seen_in_order(envelopes: list[dict[str, Any]]) -> bool:
    """Per partition, messages first arrive in offset order (redeliveries of earlier ones are allowed)."""
    for offsets in by_partition(envelopes).values():
        seen: list[int] = []
        for offset in offsets:
            if offset not in seen:
                seen.append(offset)
        if seen != sorted(seen):
            return False
    return True
