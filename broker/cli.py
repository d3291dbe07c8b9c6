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
    """Run a broker node on its HTTP server."""
    settings = load_settings(config_file, **flags)
    setup_logging(settings.log_level)
    from .server import serve as run_server

    try:
        run_server(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {settings.host}:{settings.port}: {exc.strerror}") from None


_OWN_PACKAGES = {"broker", "driver", "journal_spark", "nats_bridge", "bench"}


def _add_optional(module_name: str, attr: str, group: click.Group | None = None, name: str | None = None) -> None:
    """Add a command whose module, or whose extra's third-party packages, may not be installed
    (a node installed without ``[journal]`` has ``journal_spark`` but not ``stomp``). A module of
    our own packages missing under one that is installed is a bug, and still raises."""
    try:
        module = __import__(module_name, fromlist=[attr])
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing != module_name and not module_name.startswith(missing + ".") \
                and missing.split(".")[0] in _OWN_PACKAGES:
            raise
        return
    (group or main).add_command(getattr(module, attr), name)


main.add_command(status)
_add_optional("journal_spark.cli", "journal")
_add_optional("driver.cli", "consume")
_add_optional("driver.seek_cli", "seek")
_add_optional("bench.cli", "bench")
_add_optional("journal_spark.jms.cli", "bridge")


def _add_ingress_commands() -> None:
    """``toymb journal ingress`` (Kafka) and ``toymb journal jms-ingress`` (JMS) beside ``run``."""
    journal = main.commands.get("journal")
    if isinstance(journal, click.Group):
        _add_optional("journal_spark.ingress_cli", "ingress", journal, "ingress")
        _add_optional("journal_spark.jms.cli", "jms_ingress", journal, "jms-ingress")


_add_ingress_commands()



def _add_nats_bridge() -> None:
    """``toymb bridge nats --routes FILE`` beside the JMS bridges' management commands."""
    bridge = main.commands.get("bridge")
    if isinstance(bridge, click.Group):
        _add_optional("nats_bridge.cli", "nats_bridge", bridge)


_add_nats_bridge()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
