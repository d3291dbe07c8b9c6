"""``Consumer``: runs ``@subscribe`` handlers behind an embedded push receiver.

    consumer = Consumer(my_module)          # or handlers, or both
    consumer.run()                          # blocks; SIGTERM/SIGINT deregister and return

It serves the receiver first and registers afterwards, so the broker never pushes to a port that
is not listening yet; registration keeps retrying while the broker is down.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from types import FrameType
from typing import Any

from . import config
from .client import Template
from .errors import ConfigurationError
from .membership import Membership
from .receiver import DEFAULT_PATH, PushDispatcher, Receiver
from .subscribe import Subscription, subscriptions_in

log = logging.getLogger(__name__)


class Consumer:
    """Serves pushes for every subscription found in ``sources`` (modules or decorated handlers).

    Parameters:
        sources: modules, decorated functions/classes, or lists of them.
        template: the client to register with; default ``Template()`` (``TOYMB_URLS``).
        app_name: the app part of derived subscriber ids (default ``TOYMB_APP_NAME`` or the script name).
        host, port: where the receiver listens (default ``TOYMB_CONSUMER_HOST/PORT``, 127.0.0.1 and
            a free port).
        advertise_url: base URL the broker should push to (default ``TOYMB_ADVERTISE_URL``, else
            the receiver's own address).
        heartbeat_s: heartbeat period override.
    """

    def __init__(self, *sources: object, template: Template | None = None, app_name: str | None = None,
                 host: str | None = None, port: int | None = None, advertise_url: str | None = None,
                 path: str = DEFAULT_PATH, heartbeat_s: float | None = None) -> None:
        self.subscriptions: list[Subscription] = subscriptions_in(*sources)
        if not self.subscriptions:
            raise ConfigurationError("no @subscribe handlers to run")
        try:
            self.settings = config.ConsumerSettings.from_env(host, port, advertise_url)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self._own_template = template is None
        self.template = template or Template()
        self.app_name = app_name
        self.heartbeat_s = heartbeat_s
        self.dispatcher = PushDispatcher()
        self.receiver = Receiver(self.dispatcher, host=self.settings.host, port=self.settings.port, path=path)
        self.memberships: list[Membership] = []
        self._ids: dict[str, Subscription] = {}
        for sub in self.subscriptions:
            sid = sub.stable_id(app_name)
            if sid in self._ids:
                raise ConfigurationError(f"{sub.name} and {self._ids[sid].name} would share "
                                         f"subscriber id {sid!r}")
            self._ids[sid] = sub
        self._stopped = threading.Event()
        self._started = False

    @property
    def subscriber_ids(self) -> list[str]:
        """The stable subscriber ids this consumer registers, one per subscription."""
        return list(self._ids)

    @property
    def push_url(self) -> str:
        """The URL registered with the broker."""
        if self.settings.advertise_url:
            return self.settings.advertise_url.rstrip("/") + self.receiver.path
        return self.receiver.local_url

    def start(self) -> Consumer:
        """Serve the receiver, then register every subscription in the background."""
        if self._started:
            return self
        for sid, sub in self._ids.items():
            self.dispatcher.add(sid, sub.handler())
        self.receiver.start()
        self._started = True
        for sid, sub in self._ids.items():
            membership = Membership(self.template, sub, sid, mode="push", url=self.push_url,
                                    heartbeat_s=self.heartbeat_s,
                                    on_secret=functools.partial(self.dispatcher.set_secret, sid))
            self.memberships.append(membership)
            membership.start()
        return self

    def wait_registered(self, timeout: float | None = None) -> bool:
        """True once every subscription is registered (False if ``timeout`` passed first)."""
        return all(m.registered.wait(timeout) for m in self.memberships)

    def stop(self, *, deregister: bool = True) -> None:
        """Deregister (so partitions move now), then stop serving."""
        self._stopped.set()
        for membership in self.memberships:
            membership.stop(deregister=deregister)
        self.receiver.stop()
        if self._own_template:
            self.template.close()

    def run(self) -> None:
        """Start, block until SIGTERM or SIGINT (or :meth:`stop`), then stop and deregister."""
        self.start()
        restore: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: FrameType | None) -> None:
                log.info("toymb: signal %d, stopping", signum)
                self._stopped.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                restore[sig] = signal.signal(sig, on_signal)
        try:
            while not self._stopped.wait(0.5):
                pass
        finally:
            for sig, previous in restore.items():
                signal.signal(sig, previous)
            self.stop()

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
