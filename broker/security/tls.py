"""Serving HTTPS directly, when ``tls_cert`` and ``tls_key`` are set.

The node's server (broker.aserver) speaks only plain HTTP, so a node with a certificate is served by cheroot (CherryPy's
thread-pool WSGI server, which terminates TLS with the standard ``ssl`` module). The client's
address stays the real one, so the loopback rule and tokens work as over plain HTTP. Plain HTTP
requests to the TLS port are refused by the handshake.

Running behind a TLS-terminating proxy instead also works; then configure tokens, since every
client reaches the node from the proxy's (loopback) address.
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
from types import FrameType

from ..config import Settings
from ..errors import ConfigError

log = logging.getLogger(__name__)


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """A server context with the node's certificate; TLS 1.2 or newer.

    Raises:
        ConfigError: the certificate or key cannot be loaded.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load tls_cert/tls_key: {exc}") from None
    return context


def serve_tls(settings: Settings) -> None:
    """Start the node and serve HTTPS until SIGTERM or SIGINT, then stop cleanly."""
    from cheroot import wsgi
    from cheroot.ssl.builtin import BuiltinSSLAdapter

    from ..app import create_app
    from ..server import freeze_startup_heap

    ssl_context(settings)  # fail before starting anything when the files are bad
    app = create_app(settings)
    node = app.extensions["toymb"]
    freeze_startup_heap()
    server = wsgi.Server((settings.host, settings.port), app, numthreads=settings.threads,
                         server_name="toymb", timeout=max(60, settings.max_wait_ms // 1000 + 30))
    server.max_request_body_size = settings.max_request
    adapter = BuiltinSSLAdapter(settings.tls_cert, settings.tls_key)
    adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
    server.ssl_adapter = adapter
    stopping = threading.Event()

    def shutdown(signum: int, _frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            log.info("signal %d: stopping", signum)
            # stop() joins the worker threads; not from inside the signal handler.
            threading.Thread(target=server.stop, name="toymb-tls-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        server.prepare()
        log.info("serving %s on https://%s:%s", node.name, settings.host, server.bind_addr[1])
        server.serve()
    finally:
        node.stop()
