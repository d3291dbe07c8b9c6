"""``toymb bridge nats --routes FILE``: the long-running NATS <-> JMS bridge process."""

from __future__ import annotations

import asyncio
import logging

import click

from .errors import NatsBridgeError


@click.command("nats")
@click.option("--routes", "routes_file", envvar="TOYMB_ROUTES", required=True, type=click.Path(dir_okay=False),
              help="routes properties file with nats-bridge.<name>.* entries, or nats-jms-bridge's YAML "
                   "(.yaml/.yml) [TOYMB_ROUTES]")
@click.option("--name", "names", multiple=True, help="run only this bridge (repeatable)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address of the management HTTP server")
@click.option("--port", type=click.IntRange(0, 65535), default=0, envvar="TOYMB_BRIDGE_PORT",
              help="port of the management HTTP server (0: any free port, printed) [TOYMB_BRIDGE_PORT]")
@click.option("--log-level", default="INFO", envvar="TOYMB_LOG_LEVEL", show_default=True)
def nats_bridge(routes_file: str, names: tuple[str, ...], host: str, port: int, log_level: str) -> None:
    """Bridge NATS and JMS (ActiveMQ over STOMP): request/reply and forward, until SIGTERM."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .config import load_settings
    from .runner import run
    from .yaml_config import load_yaml_settings

    load = load_yaml_settings if routes_file.endswith((".yaml", ".yml")) else load_settings
    try:
        settings = load(routes_file, names)
    except NatsBridgeError as exc:
        raise click.ClickException(str(exc)) from None

    def ready(actual: int) -> None:
        click.echo(f"nats-bridge: {', '.join(b.name for b in settings.bridges)}; management on "
                   f"http://{host}:{actual}/bridges", err=True)

    try:
        asyncio.run(run(settings, host, port, ready))
    except NatsBridgeError as exc:
        raise click.ClickException(str(exc)) from None
