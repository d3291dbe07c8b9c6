"""Small loopback servers the driver tests put between the driver and a node."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: Any


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler], state: Any = None) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields the base URL."""
    server = _Server(("127.0.0.1", 0), handler)
    server.state = state
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Always503(BaseHTTPRequestHandler):
    """A node that is up but cannot serve (e.g. it lost the store)."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"error": "unavailable", "message": "store unreachable"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer  # noqa: N815 - http.server's names

    def log_message(self, *args: Any) -> None:
        pass


class SlowFirstAnswerProxy(BaseHTTPRequestHandler):
    """Forwards every request to ``state["target"]``; the first answer is held for ``state["delay"]``
    seconds, so the client times out after the node has already stored the message."""

    def do_POST(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = requests.post(state["target"] + self.path, data=body,
                               headers={"Content-Type": "application/json"}, timeout=10)
        with state["lock"]:
            state["forwarded"].append((answer.status_code, answer.json()))
            first = len(state["forwarded"]) == 1
        if first:
            time.sleep(state["delay"])
        try:
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)
        except OSError:
            pass  # the client gave up on this connection

    def log_message(self, *args: Any) -> None:
        pass
