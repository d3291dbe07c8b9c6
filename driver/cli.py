"""``toymb consume MODULE[:ATTR]``: run the ``@subscribe`` handlers a module defines."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from .consumer import Consumer
from .errors import ConfigurationError
from .subscribe import subscriptions_in


def load_handlers(spec: str) -> object:
    """The module named by ``spec``, or its attribute ``ATTR`` for ``module:ATTR``."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        # Like `flask --app` and `gunicorn`: the user's module is usually in the current folder.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="MODULE") from None
    if not attr:
        return module
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise click.BadParameter(f"{module_name!r} has no attribute {attr!r}",
                                     param_hint="MODULE") from None
    return target


@click.command()
@click.argument("module", metavar="MODULE[:ATTR]")
@click.option("--port", type=click.IntRange(0, 65535), envvar="TOYMB_CONSUMER_PORT", show_envvar=True,
              help="port of the push receiver (0: any free port)")
@click.option("--host", envvar="TOYMB_CONSUMER_HOST", show_envvar=True, help="address the receiver binds")
@click.option("--advertise-url", envvar="TOYMB_ADVERTISE_URL", show_envvar=True,
              help="base URL the broker pushes to, when it must reach this process by another name")
@click.option("--app-name", envvar="TOYMB_APP_NAME", show_envvar=True,
              help="app part of the stable subscriber ids (default: the module name)")
@click.option("--log-level", default="INFO", show_default=True, help="logging level")
def consume(module: str, port: int | None, host: str | None, advertise_url: str | None, app_name: str | None,
            log_level: str) -> None:
    """Run every @subscribe handler of MODULE (or MODULE:ATTR) behind a push receiver.

    Node URLs come from TOYMB_URLS (comma-separated), the token from TOYMB_TOKEN. SIGTERM or
    Ctrl-C deregisters the subscribers and exits.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    source = load_handlers(module)
    try:
        if not subscriptions_in(source):
            raise click.UsageError(f"{module} defines no @subscribe handlers")
        consumer = Consumer(source, app_name=app_name or module.partition(":")[0], host=host, port=port,
                            advertise_url=advertise_url)
        consumer.start()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot serve the push receiver: {exc}") from None
    click.echo(f"toymb consume: {len(consumer.subscriptions)} handler(s), receiving at {consumer.push_url}",
               err=True)
    consumer.run()
