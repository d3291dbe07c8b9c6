"""A bare WSGI app (no framework) on the node's own server and thread count: the HTTP ceiling.

    python -m bench.bare_wsgi PORT THREADS
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any

from broker.aserver import Server

ANSWER = b'{"id":"0","topic":"bench","partition":0,"offset":0,"duplicate":false}'


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Read the whole body, answer a publish-sized JSON body: what any publish must at least do."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))])
    return [ANSWER]


def main() -> None:
    port, threads = int(sys.argv[1]), int(sys.argv[2])
    server = Server(app, host="127.0.0.1", port=port, threads=threads, max_connections=1000,
                    idle_timeout=60, header_timeout=10, max_request=1 << 24, ident="bare")
    server.run((signal.SIGTERM,), lambda _signum: server.drain(1.0, 2.0))


if __name__ == "__main__":
    main()
