"""Serving a node under waitress, a production WSGI server.

waitress runs one process with a pool of threads. That fits a node: the group-commit writer,
the dispatcher and the cluster heartbeat are in-process state that must exist exactly once per
node, which a pre-forking server (gunicorn with several workers) would multiply.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from waitress.server import create_server

from .app import create_app
from .config import Settings

log = logging.getLogger(__name__)


def serve(settings: Settings) -> None:
    """Start the node and serve until SIGTERM or SIGINT, then stop cleanly."""
    from .security import check_bind

    check_bind(settings)  # no tokens: refuse a non-loopback address unless allow_remote
    if settings.tls_cert:
        from .security.tls import serve_tls

        return serve_tls(settings)  # waitress cannot terminate TLS
    app = create_app(settings)
    node = app.extensions["toymb"]
    server = create_server(
        app, host=settings.host, port=settings.port, threads=settings.threads,
        connection_limit=max(100, settings.threads * 8), channel_timeout=max(60, settings.max_wait_ms // 1000 + 30),
        # waitress's own cap is looser, so the app answers an oversized body with a JSON 413.
        max_request_body_size=settings.max_request * 2, ident="toymb", clear_untrusted_proxy_headers=True,
    )
    stopping = threading.Event()

    def shutdown(signum: int, _frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            log.info("signal %d: stopping", signum)
            server.close()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    log.info("serving %s on http://%s:%s", node.name, settings.host, server.effective_port)
    try:
        server.run()
    except OSError:
        if not stopping.is_set():
            raise
    finally:
        node.stop()
