"""The ``toymb`` command: serve, status, journal, consume, bench."""

from __future__ import annotations

import sys
from typing import Any

import click

from .config import load_settings
from .errors import ConfigError
from .logs import setup_logging

_OWN_PACKAGES = {"broker", "driver", "journal_spark", "nats_bridge", "bench"}


def _load_optional(module_name: str, attr: str) -> click.Command | None:
    """The command ``attr`` of ``module_name``, or None when that module, or its extra's third-party
    packages, is not installed (a node installed without ``[journal]`` has ``journal_spark`` but not
    ``stomp``). A module of our own packages missing under one that is installed is a bug, and still
    raises."""
    try:
        module = __import__(module_name, fromlist=[attr])
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing != module_name and not module_name.startswith(missing + ".") \
                and missing.split(".")[0] in _OWN_PACKAGES:
            raise
        return None
    command = getattr(module, attr)
    assert isinstance(command, click.Command)
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run (or when ``--help`` lists them).

    Each process of ``toymb`` runs one command: a node (``serve``) or a journal job imported every
    command's module before, the console's Flask routes, the STOMP and NATS clients and the bench's
    included, for nothing. ``lazy`` names each command's module and attribute; ``children`` adds, to
    a command that is a group, commands of other modules (``toymb journal ingress`` beside ``run``).
    A command whose module cannot be imported (its extra not installed) is left out, as if absent.
    """

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None,
                 children: dict[str, list[tuple[str | None, str, str]]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.children = dict(children or {})

    def _load(self, name: str) -> None:
        module_name, attr = self.lazy.pop(name)
        command = _load_optional(module_name, attr)
        if command is None:
            return
        self.add_command(command, name)
        if isinstance(command, click.Group):
            for child_name, child_module, child_attr in self.children.get(name, []):
                child = _load_optional(child_module, child_attr)
                if child is not None:
                    command.add_command(child, child_name)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in list(self.lazy):
            self._load(name)
        return super().list_commands(ctx)


@click.group(cls=LazyGroup, lazy={
    "status": ("broker.console.status", "status"),
    "journal": ("journal_spark.cli", "journal"),
    "consume": ("driver.cli", "consume"),
    "seek": ("driver.seek_cli", "seek"),
    "bench": ("bench.cli", "bench"),
    "bridge": ("journal_spark.jms.cli", "bridge"),
}, children={
    # ``toymb journal ingress`` (Kafka) and ``toymb journal jms-ingress`` (JMS) beside ``run``;
    # ``toymb bridge nats --routes FILE`` beside the JMS bridges' management commands.
    "journal": [("ingress", "journal_spark.ingress_cli", "ingress"),
                ("jms-ingress", "journal_spark.jms.cli", "jms_ingress")],
    "bridge": [(None, "nats_bridge.cli", "nats_bridge")],
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
