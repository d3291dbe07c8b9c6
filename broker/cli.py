"""The ``toymb`` command: serve, status, journal, consume, bench."""

from __future__ import annotations

import sys
from typing import Any

import click

from .config import load_settings
from .errors import ConfigError
from .lazy_commands import LazyGroup
from .logs import setup_logging


# Each command's module is imported when it runs (broker/lazy_commands.py); a command whose extra
# is not installed is left out.
@click.group(cls=LazyGroup, lazy={
    "status": ("broker.console.status", "status"),
    "journal": ("journal_spark.cli", "journal"),
    "consume": ("driver.cli", "consume"),
    "seek": ("driver.seek_cli", "seek"),
    "bench": ("bench.cli", "bench"),
    "bridge": ("journal_spark.jms.cli", "bridge"),
})
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
