"""``@subscribe``: mark a function, or a class with ``consume(message)``, as a consumer of a topic.

The decorator checks everything it can when the module is imported (names, the handler's shape)
and returns the handler unchanged, so a test can still call it directly. The subscription itself
is kept on the handler and found later by :func:`subscriptions_in`.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, TypeVar

from . import config
from .errors import ConfigurationError
from .message import Message
from .names import NAME_PATTERN, SUBSCRIBER_ID_PATTERN, is_name, is_subscriber_id

_ATTR = "__toymb_subscriptions__"

H = TypeVar("H", bound=Callable[..., Any])
Handler = Callable[[Message], object]


def check_name(value: object, what: str) -> str:
    """``value`` if it is a valid topic or group name (or subscriber id), else ConfigurationError."""
    valid, pattern = (is_subscriber_id, SUBSCRIBER_ID_PATTERN) if what == "subscriber id" else (is_name, NAME_PATTERN)
    if valid(value):
        return value
    raise ConfigurationError(f"{what} must be a string matching {pattern}, not {value!r}")


@dataclass(frozen=True)
class Subscription:
    """One ``@subscribe`` declaration: which topic and group, and the handler behind it.

    ``target`` is the decorated function or class; :meth:`handler` gives the callable that takes a
    :class:`Message` (for a class, the ``consume`` method of one instance made on first use).
    """

    topic: str
    group: str
    target: Callable[..., Any]
    subscriber_id: str | None = None
    start: Literal["latest", "earliest"] = "latest"
    #: The group's filter (predicate text) and dead-letter policy, sent at registration.
    filter: str | None = None
    dead_letter: Mapping[str, int] | None = None
    _instance: list[Any] = field(default_factory=list, compare=False, repr=False)

    @property
    def name(self) -> str:
        """``module.qualname`` of the decorated object."""
        return f"{getattr(self.target, '__module__', '?')}.{getattr(self.target, '__qualname__', '?')}"

    def handler(self) -> Handler:
        """The callable to give each message to."""
        if inspect.isclass(self.target):
            if not self._instance:
                self._instance.append(self.target())
            method: Handler = self._instance[0].consume
            return method
        return self.target

    def stable_id(self, app_name: str | None = None, instance: str | None = None) -> str:
        """The subscriber id: the explicit one, else derived from app, handler, topic and group.

        The same code registering again gets the same id, so the broker gives it back its
        partitions. Set ``TOYMB_INSTANCE`` (or pass ``instance``) per replica when one app runs
        several copies that must each own partitions.
        """
        if self.subscriber_id:
            return self.subscriber_id
        return derive_id(self.name, self.topic, self.group, app_name=app_name, instance=instance)


def derive_id(handler_name: str, topic: str, group: str, *, app_name: str | None = None,
              instance: str | None = None) -> str:
    """A readable, stable subscriber id from the app, handler, topic, group and instance names."""
    app = app_name or config.env("TOYMB_APP_NAME") or _default_app_name()
    instance = instance if instance is not None else config.env("TOYMB_INSTANCE")
    parts = [app, handler_name, topic, group] + ([instance] if instance else [])
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", ".".join(parts)).strip("-") or "toymb"
    if len(readable) <= 200:
        return readable
    digest = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]
    return f"{readable[:183]}-{digest}"


def _default_app_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return stem if stem and stem not in ("__main__", "-c", "") else "app"


def _check_handler(target: Callable[..., Any]) -> None:
    if inspect.isclass(target):
        consume = getattr(target, "consume", None)
        if not callable(consume):
            raise ConfigurationError(f"@subscribe on class {target.__qualname__} needs a "
                                     "consume(message) method")
        try:
            inspect.signature(target).bind()
        except TypeError:
            raise ConfigurationError(f"@subscribe class {target.__qualname__} must be constructible "
                                     "without arguments") from None
        except ValueError:
            return  # builtin or C-level signature: nothing to check
        fn: Callable[..., Any] = consume
        args: tuple[Any, ...] = (object(), object())  # self, message
    else:
        if not callable(target):
            raise ConfigurationError("@subscribe decorates a function or a class with consume(message)")
        fn, args = target, (object(),)
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        raise ConfigurationError(f"{getattr(fn, '__qualname__', fn)!s} must accept exactly one message "
                                 "argument") from None
    except ValueError:
        pass


def subscribe(topic: str, group: str, *, id: str | None = None,
              start: Literal["latest", "earliest"] = "latest", filter: str | None = None,
              dead_letter: Mapping[str, int] | None = None) -> Callable[[H], H]:
    """Declare a consumer of ``topic`` in ``group``.

    Parameters:
        topic: the topic name.
        group: the consumer group; every group receives every message.
        id: a fixed subscriber id. By default it is derived from the app name, the handler and
            the group, so a restart keeps the same id (and partitions).
        start: where a new group begins: ``"latest"`` (default) or ``"earliest"``.
        filter: the group's filter, e.g. ``"msg.header.region^=eu- && msg.key!=test"``: the
            handler only gets matching messages; the others count as acknowledged.
        dead_letter: the group's dead-letter policy, ``{"max_attempts": 5, "min_backoff_ms": 200,
            "max_backoff_ms": 10000}`` (each optional).

    The decorated object is returned unchanged. A function takes one :class:`Message`; a class
    has a no-argument constructor and ``consume(message)``. Returning acks the message; raising
    makes the broker deliver it again.

    Raises:
        ConfigurationError: at decoration time, for a bad name or handler.
    """
    check_name(topic, "topic")
    check_name(group, "group")
    if id is not None:
        check_name(id, "subscriber id")
    if start not in ("latest", "earliest"):
        raise ConfigurationError(f"start must be 'latest' or 'earliest', not {start!r}")

    def decorate(target: H) -> H:
        _check_handler(target)
        sub = Subscription(topic=topic, group=group, target=target, subscriber_id=id, start=start,
                           filter=filter, dead_letter=dead_letter)
        existing = subscriptions_of(target)
        if any((s.topic, s.group) == (topic, group) for s in existing):
            raise ConfigurationError(f"{sub.name} already subscribes to {topic}/{group}")
        try:
            setattr(target, _ATTR, (*existing, sub))
        except (AttributeError, TypeError):
            raise ConfigurationError(f"@subscribe cannot annotate {target!r}; "
                                     "wrap it in a function") from None
        return target

    return decorate


def subscriptions_of(target: object) -> tuple[Subscription, ...]:
    """The subscriptions declared on one decorated function or class (empty if none)."""
    found = getattr(target, "__dict__", {}).get(_ATTR, ())
    return tuple(s for s in found if isinstance(s, Subscription))


def subscriptions_in(*sources: object) -> list[Subscription]:
    """Every subscription of the given modules, decorated objects or iterables of them.

    A module contributes the handlers defined in it (not ones it merely imports), in definition
    order of its namespace; duplicates are dropped.
    """
    found: list[Subscription] = []
    for source in sources:
        if isinstance(source, ModuleType):
            for value in list(vars(source).values()):
                subs = subscriptions_of(value)
                if subs and getattr(value, "__module__", None) == source.__name__:
                    found.extend(subs)
        elif isinstance(source, Subscription):
            found.append(source)
        elif subscriptions_of(source):
            found.extend(subscriptions_of(source))
        elif isinstance(source, Iterable) and not isinstance(source, str | bytes):
            found.extend(subscriptions_in(*source))
        else:
            raise ConfigurationError(f"{source!r} has no @subscribe handlers")
    unique: list[Subscription] = []
    for sub in found:
        if sub not in unique:
            unique.append(sub)
    return unique
