"""``jms-ingress`` (run the JMS ingresses of a routes file) and ``bridge`` (manage running bridges).

Wire them under ``toymb``: ``toymb journal jms-ingress --routes FILE`` and
``toymb bridge status|pause|resume|stop|start``.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from typing import Any

import click
import requests

from broker.lazy_commands import LazyGroup

from ..errors import JournalError
from ..routes_file import load_routes
from .config import ingress_configs
from .ingress import JmsIngress
from .manage import ManagementServer
from .metrics import JmsMetrics

log = logging.getLogger(__name__)


@click.command("jms-ingress")
@click.option(
    "--routes",
    "routes_file",
    envvar="TOYMB_ROUTES",
    required=True,
    type=click.Path(dir_okay=False),
    help="routes properties file with ingress.<name>.jms.queue|jms.topic entries [TOYMB_ROUTES]",
)
@click.option("--name", "names", multiple=True, help="run only this ingress (repeatable)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address of the management HTTP server")
@click.option("--port", type=click.IntRange(0, 65535), default=0, envvar="TOYMB_BRIDGE_PORT",
              help="port of the management HTTP server (0: any free port, printed) [TOYMB_BRIDGE_PORT]")
@click.option("--log-level", default="INFO", envvar="TOYMB_LOG_LEVEL", show_default=True)
def jms_ingress(routes_file: str, names: tuple[str, ...], host: str, port: int, log_level: str) -> None:
    """Bring JMS queues and topics into broker topics (Artemis JMS bridge parameters), until stopped."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        routes = load_routes(routes_file)
        configs = ingress_configs(routes, names)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    if not configs:
        raise click.ClickException(
            f"{routes_file} has no JMS ingress (ingress.<name>.jms.queue or jms.topic)"
        )
    metrics = JmsMetrics()
    bridges = {c.name: JmsIngress(c, metrics) for c in configs}
    server = ManagementServer(bridges, metrics.registry, host, port).start()  # type: ignore[arg-type]
    click.echo(
        f"jms-ingress: {', '.join(bridges)}; management on http://{host}:{server.port}/bridges", err=True
    )
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for bridge in bridges.values():
        bridge.start()
    try:
        stopping.wait()
    finally:
        for bridge in bridges.values():
            bridge.stop()
        server.close()


# ``toymb bridge nats --routes FILE`` beside the JMS bridges' management commands (nats_bridge may be
# missing: then so is the command).
@click.group("bridge", cls=LazyGroup, lazy={"nats": ("nats_bridge.cli", "nats_bridge")})
def bridge() -> None:
    """Manage running bridges over HTTP: status, pause, resume, stop, start."""


def _call(url: str, method: str, path: str) -> Any:
    try:
        response = requests.request(method, url.rstrip("/") + path, timeout=10)
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach {url}: {type(exc).__name__}") from None
    body = response.json() if response.headers.get("Content-Type", "").startswith("application/json") else {}
    if response.status_code >= 400:
        raise click.ClickException(body.get("message") or f"HTTP {response.status_code}")
    return body


_URL = click.option("--url", envvar="TOYMB_BRIDGE_URL", default="http://127.0.0.1:9465", show_default=True,
                    help="management URL of the bridge process [TOYMB_BRIDGE_URL]")


@bridge.command()
@_URL
@click.argument("name", required=False)
def status(url: str, name: str | None) -> None:
    """Status and counts of every bridge, or of NAME."""
    click.echo(json.dumps(_call(url, "GET", f"/bridges/{name}" if name else "/bridges"), indent=2))


def _action(action: str) -> click.Command:
    @_URL
    @click.argument("name")
    def run(url: str, name: str) -> None:
        result = _call(url, "POST", f"/bridges/{name}/{action}")
        click.echo(f"{name}: {result.get('state')}")

    run.__doc__ = f"{action.capitalize()} the bridge NAME."
    return click.command(action)(run)


for _name in ("pause", "resume", "stop", "start"):
    bridge.add_command(_action(_name))
