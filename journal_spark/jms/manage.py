"""Management over HTTP for running bridges: status, counts, pause, resume, stop and start.

::

    GET  /bridges                      -> {"bridges": [status, ...]}
    GET  /bridges/<name>               -> status: state (STARTED|PAUSED|STOPPED|FAILED), message_count,
                                          aborted_count, batches, last_error, parameters
    POST /bridges/<name>/pause|resume|stop|start  -> the new status
    GET  /metrics                      -> Prometheus text

Errors are JSON ``{"error", "message"}`` with a 4xx status. Served on loopback by default.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class Managed(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def status(self) -> dict[str, Any]: ...


ACTIONS = ("pause", "resume", "stop", "start")


class ManagementServer:
    """A small threaded HTTP server over a dict of bridges."""

    def __init__(self, bridges: dict[str, Managed], registry: CollectorRegistry, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.bridges = bridges
        self.registry = registry
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:   # quiet: the bridges log what matters
                pass

            def _send(self, status: int, payload: Any, ctype: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: str, message: str) -> None:
                self._send(status, {"error": code, "message": message})

            def do_GET(self) -> None:
                parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
                if parts == ["metrics"]:
                    self._send(200, generate_latest(owner.registry), CONTENT_TYPE_LATEST)
                elif parts == ["bridges"]:
                    self._send(200, {"bridges": [b.status() for b in owner.bridges.values()]})
                elif len(parts) == 2 and parts[0] == "bridges":
                    bridge = owner.bridges.get(parts[1])
                    if bridge is None:
                        self._error(404, "not_found", f"no bridge named {parts[1]!r}")
                    else:
                        self._send(200, bridge.status())
                else:
                    self._error(404, "not_found", f"no such resource {self.path[:100]!r}")

            def do_POST(self) -> None:
                parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
                if len(parts) != 3 or parts[0] != "bridges":
                    self._error(404, "not_found", f"no such resource {self.path[:100]!r}")
                    return
                bridge = owner.bridges.get(parts[1])
                if bridge is None:
                    self._error(404, "not_found", f"no bridge named {parts[1]!r}")
                elif parts[2] not in ACTIONS:
                    self._error(400, "bad_action", f"action must be one of {', '.join(ACTIONS)}")
                else:
                    getattr(bridge, parts[2])()
                    self._send(200, bridge.status())

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="jms-manage", daemon=True)

    def start(self) -> ManagementServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
