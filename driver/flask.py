"""Flask integration: mount the push receiver on the host app, the way ToyMB's driver adds
``/receivemessage`` to a Spring app.

    app = Flask(__name__)
    app.config["TOYMB_ADVERTISE_URL"] = "http://127.0.0.1:5000"
    mb = ToyMB(app)                         # or mb = ToyMB(); mb.init_app(app)

    @mb.subscribe(topic="orders", group="billing")
    def on_order(message: Message) -> None: ...

Subscriptions register once the app is serving: a background thread waits until the receiver
route answers at the advertised URL, then registers (retrying while the broker is down) and
heartbeats. Without an advertised URL, the first request the app serves names its address.
On SIGTERM or interpreter exit the subscribers are deregistered.

Config keys (each falls back to its environment twin): ``TOYMB_URLS``, ``TOYMB_TOKEN``,
``TOYMB_ADVERTISE_URL``, ``TOYMB_APP_NAME``; ``TOYMB_PUSH_PATH`` (default ``/toymb/push``).
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import requests
from flask import Flask, Response, jsonify, request

from . import config
from .client import Template
from .membership import Membership, on_sigterm
from .receiver import DEFAULT_PATH, MAX_PUSH_BYTES, PushDispatcher, handle_signed
from .subscribe import Subscription, subscribe, subscriptions_in

log = logging.getLogger(__name__)
H = TypeVar("H", bound=Callable[..., Any])


class ToyMB:
    """The Flask extension. Handlers come from :meth:`subscribe` or :meth:`add`."""

    def __init__(self, app: Flask | None = None, *handlers: object, template: Template | None = None) -> None:
        self.template = template
        self.subscriptions: list[Subscription] = subscriptions_in(*handlers) if handlers else []
        self.dispatcher = PushDispatcher()
        self.memberships: list[Membership] = []
        self.path = DEFAULT_PATH
        self.app_name: str | None = None
        self.advertise_url: str | None = None
        self._lock = threading.Lock()
        self._registering = False
        self._stopped = threading.Event()
        if app is not None:
            self.init_app(app)

    def subscribe(self, topic: str, group: str, *, id: str | None = None,
                  start: Literal["latest", "earliest"] = "latest") -> Callable[[H], H]:
        """``driver.subscribe`` that also adds the handler to this extension."""
        declare = subscribe(topic, group, id=id, start=start)

        def decorate(target: H) -> H:
            self.add(declare(target))
            return target

        return decorate

    def add(self, *handlers: object) -> None:
        """Add decorated handlers or modules of them (before the app starts serving)."""
        with self._lock:
            for sub in subscriptions_in(*handlers):
                if sub not in self.subscriptions:
                    self.subscriptions.append(sub)

    def init_app(self, app: Flask) -> None:
        """Mount the receiver route and arrange registration once ``app`` serves."""
        cfg = app.config
        self.path = str(cfg.get("TOYMB_PUSH_PATH") or DEFAULT_PATH)
        self.app_name = cfg.get("TOYMB_APP_NAME") or config.env("TOYMB_APP_NAME") or app.name
        self.advertise_url = cfg.get("TOYMB_ADVERTISE_URL") or config.env("TOYMB_ADVERTISE_URL")
        if self.template is None:
            self.template = Template(cfg.get("TOYMB_URLS"), token=cfg.get("TOYMB_TOKEN"))
        app.extensions["toymb"] = self
        app.add_url_rule(self.path, "toymb_push", self._view, methods=["GET", "POST"])
        app.before_request(self._first_request)
        on_sigterm(self.stop)
        atexit.register(self.stop)
        if self.advertise_url:
            self._start_registering(self.advertise_url)

    # -- serving --------------------------------------------------------------------------------

    def _view(self) -> tuple[Response, int]:
        if request.method == "GET":
            return jsonify(status="up", subscribers=self.dispatcher.subscriber_ids), 200
        if (request.content_length or 0) > MAX_PUSH_BYTES:
            return jsonify(error="payload_too_large", message="push body too large"), 413
        status, answer = handle_signed(self.dispatcher, request.headers, request.get_data(cache=False))
        return jsonify(answer), status

    def _first_request(self) -> None:
        if not self._registering and not self.advertise_url:
            self._start_registering(request.host_url.rstrip("/"))

    # -- registration ---------------------------------------------------------------------------

    def _start_registering(self, base_url: str) -> None:
        with self._lock:
            if self._registering:
                return
            self._registering = True
        url = base_url.rstrip("/") + self.path
        threading.Thread(target=self._register_when_serving, args=(url,), name="toymb-flask-register",
                         daemon=True).start()

    def _register_when_serving(self, url: str) -> None:
        # Registering before the route answers would let the broker push into a closed port and
        # burn its retries; so first wait for our own receiver to answer at the advertised URL.
        delay = 0.1
        while not self._stopped.is_set():
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            self._stopped.wait(delay)
            delay = min(delay * 2, 2.0)
        assert self.template is not None
        with self._lock:
            subscriptions = list(self.subscriptions)
        for sub in subscriptions:
            if self._stopped.is_set():
                return
            sid = sub.stable_id(self.app_name)
            self.dispatcher.add(sid, sub.handler())
            membership = Membership(self.template, sub, sid, mode="push", url=url,
                                    on_secret=functools.partial(self.dispatcher.set_secret, sid))
            self.memberships.append(membership)
            membership.start()
        log.info("toymb: %d subscription(s) of %s registering for %s", len(subscriptions), self.app_name, url)

    def wait_registered(self, timeout: float = 30.0) -> bool:
        """True once every subscription is registered, False if ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while len(self.memberships) < len(self.subscriptions) or not self._registering:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return all(m.registered.wait(max(0.0, deadline - time.monotonic())) for m in self.memberships)

    def stop(self) -> None:
        """Deregister every subscriber (called on SIGTERM and at exit)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        for membership in self.memberships:
            membership.stop()
