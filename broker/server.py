"""Serving a node on its own HTTP server (:mod:`broker.aserver`: asyncio on uvloop, llhttp parsing).

One process, one event loop thread and a pool of worker threads. That fits a node: the
group-commit writer, the dispatcher and the cluster heartbeat are in-process state that must
exist exactly once per node, which a pre-forking server (gunicorn with several workers) would multiply.
"""

from __future__ import annotations

import gc
import logging
import signal

from .api.fast_publish import PublishFastPath
from .app import create_app
from .aserver import Server, ensure_fd_limit
from .config import Settings

log = logging.getLogger(__name__)

# On SIGTERM, answers in progress are sent before their connections close. One that makes no
# progress for DRAIN_STALL_S (its client stopped reading, a long poll still waiting) is cut, and
# whatever is still open after DRAIN_TIMEOUT_S: within the 30 s most supervisors (Kubernetes,
# systemd) wait before a SIGKILL. A fixed 5 s cut 8 MiB answers to slow readers on a loaded machine.
DRAIN_STALL_S = 5.0
DRAIN_TIMEOUT_S = 25.0


def freeze_startup_heap() -> None:
    """Move every object alive after the node's start out of the garbage collector's reach.

    The modules, the Flask app, SQLAlchemy's metadata and the like live as long as the process,
    yet each full (oldest generation) collection walked them all: while pushing 5,000 msg/s, a
    node paused 60-140 ms for one every ~10 s, every thread at once (the tail of push latency).
    Frozen, such a collection walks only what was made since: under 2 ms. Garbage made before is
    collected first, so nothing is kept that would have been freed.
    """
    gc.collect()
    gc.freeze()


def serve(settings: Settings) -> None:
    """Start the node and serve until SIGTERM or SIGINT, then stop cleanly."""
    from .security import check_bind

    check_bind(settings)  # no tokens: refuse a non-loopback address unless allow_remote
    if settings.tls_cert:
        from .security.tls import serve_tls

        return serve_tls(settings)  # the node's server speaks plain HTTP only
    ensure_fd_limit(settings.max_connections)  # before the node starts: a refusal leaves nothing running
    app = create_app(settings)
    node = app.extensions["toymb"]
    freeze_startup_heap()
    inline = app.wsgi_app.inline if isinstance(app.wsgi_app, PublishFastPath) else None
    server = Server(
        app, host=settings.host, port=settings.port, threads=settings.threads,
        max_connections=settings.max_connections, idle_timeout=settings.idle_timeout_ms / 1000,
        header_timeout=settings.header_timeout_ms / 1000, max_request=settings.max_request,
        ident="toymb", inline=inline, inline_on_loop=settings.inline_publish,
    )

    def shutdown(signum: int) -> None:
        if not server.draining:
            log.info("signal %d: stopping", signum)
            server.drain(DRAIN_STALL_S, DRAIN_TIMEOUT_S)

    log.info("serving %s on http://%s:%s", node.name, settings.host, server.effective_port)
    try:
        server.run((signal.SIGTERM, signal.SIGINT), shutdown)
    finally:
        node.stop()
