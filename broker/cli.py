"""The ``toymb`` command: serve, status, journal, consume, bench."""

from __future__ import annotations

import sys
from typing import Any

import click

from .config import load_settings
from .console.status import status
from .errors import ConfigError
from .logs import setup_logging


@click.group()
@click.version_option(package_name="toymb")
def main() -> None:
    """ToyMB: a clustered HTTP message broker with a Spark-kept journal."""


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="properties file")
@click.option("--host", help="address to bind [TOYMB_HOST]")
@click.option("--port", type=int, help="port [TOYMB_PORT]")
@click.option("--node-name", help="stable node name [TOYMB_NODE_NAME]")
@click.option("--node-url", help="URL other nodes use to reach this one [TOYMB_NODE_URL]")
@click.option("--database-url", help="SQLAlchemy URL [TOYMB_DATABASE_URL]")
@click.option("--data-dir", help="folder for SQLite [TOYMB_DATA_DIR]")
def serve(config_file: str | None, **flags: Any) -> None:
    """Run a broker node under waitress."""
    settings = load_settings(config_file, **flags)
    setup_logging(settings.log_level)
    from .server import serve as run_server

    try:
        run_server(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {settings.host}:{settings.port}: {exc.strerror}") from None


def _add_optional(module_name: str, attr: str) -> None:
    try:
        module = __import__(module_name, fromlist=[attr])
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        return
    main.add_command(getattr(module, attr))


main.add_command(status)
_add_optional("journal_spark.cli", "journal")
_add_optional("driver.cli", "consume")
_add_optional("driver.seek_cli", "seek")
_add_optional("bench.cli", "bench")
_add_optional("journal_spark.jms.cli", "bridge")


def _add_ingress_commands() -> None:
    """``toymb journal ingress`` (Kafka) and ``toymb journal jms-ingress`` (JMS) beside ``run``."""
    journal = main.commands.get("journal")
    if not isinstance(journal, click.Group):
        return
    from journal_spark.ingress_cli import ingress
    from journal_spark.jms.cli import jms_ingress

    journal.add_command(ingress, "ingress")
    journal.add_command(jms_ingress, "jms-ingress")


_add_ingress_commands()



def _add_nats_bridge() -> None:
    """``toymb bridge nats --routes FILE`` beside the JMS bridges' management commands."""
    bridge = main.commands.get("bridge")
    if isinstance(bridge, click.Group):
        from nats_bridge.cli import nats_bridge

        bridge.add_command(nats_bridge)


_add_nats_bridge()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
