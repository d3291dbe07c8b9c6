"""Click groups whose commands are imported when one of them runs: :class:`LazyGroup`.

Each ``toymb`` process runs one command. A node (``toymb serve``) or a journal job
(``toymb journal run``) imported every other command's module before it started: the console's
Flask routes, the STOMP, NATS and Kafka bridges' CLIs, the bench, for nothing (0.25 CPU-s of a
journal job's start). This module imports click only, so that any package's group can use it.
"""

from __future__ import annotations

from typing import Any

import click

_OWN_PACKAGES = {"broker", "driver", "journal_spark", "nats_bridge", "bench"}


def load_optional(module_name: str, attr: str) -> click.Command | None:
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
    assert isinstance(command, click.Command), f"{module_name}.{attr} is no click command"
    return command


class LazyGroup(click.Group):
    """A group whose commands in ``lazy`` (name: (module, attribute)) are imported on first use:
    when that command runs, or when ``--help`` lists them all. A command whose module cannot be
    imported (its extra is not installed) is left out, as if it did not exist."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def _load(self, name: str) -> None:
        command = load_optional(*self.lazy.pop(name))
        if command is not None:
            self.add_command(command, name)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in list(self.lazy):
            self._load(name)
        return super().list_commands(ctx)
