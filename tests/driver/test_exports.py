"""The public surface: what ``from driver import ...`` offers."""

from __future__ import annotations
import __future__

import inspect

import driver
from driver import errors


def test_all_is_sorted_and_complete() -> None:
    assert driver.__all__ == sorted(driver.__all__)
    public = {name for name in vars(driver) if not name.startswith("_")}
    modules = {name for name, value in vars(driver).items()
               if inspect.ismodule(value) or isinstance(value, __future__._Feature)}
    assert public - modules == set(driver.__all__)


def test_design_surface_is_exported() -> None:
    for name in ("Template", "Client", "subscribe", "Message", "PullConsumer", "ToyMB", "Consumer"):
        assert name in driver.__all__
    assert driver.Client is driver.Template


def test_every_exception_is_exported_under_one_root() -> None:
    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, Exception)
               and value.__module__ == errors.__name__}
    assert classes <= set(driver.__all__)
    for name in classes:
        assert issubclass(getattr(driver, name), driver.ToyMBError)


def test_cli_command_is_named_consume() -> None:
    from driver.cli import consume

    assert consume.name == "consume"
