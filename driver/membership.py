"""Keeping one subscriber registered: register with backoff, heartbeat, re-register, deregister.

A consumer that starts before its broker must not crash; it keeps trying, with exponential
backoff and jitter, and registers as soon as a node answers. A heartbeat answered 404 means the
broker dropped the subscriber (its lease ran out, or the node lost it), so it registers again
under the same id.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal

from .client import Registered, Template
from .errors import HTTPStatusError, NotFound, ToyMBError, TransportError, Unavailable
from .subscribe import Subscription

log = logging.getLogger(__name__)

#: Heartbeat period when the broker does not say how long a lease lasts (its default is 15 s).
DEFAULT_HEARTBEAT_S = 3.0
#: How long the secret of an earlier registration keeps signing after a new one is made.
SECRET_OVERLAP_MS = 60_000


class Membership:
    """Keeps subscriber ``subscriber_id`` of ``subscription`` registered until :meth:`stop`.

    Parameters:
        template: the client to call the broker with.
        subscription: topic, group and start position.
        subscriber_id: the stable id to register under.
        mode: ``"push"`` (then ``url`` is where the broker posts) or ``"pull"``.
        heartbeat_s: seconds between heartbeats; default a third of the lease the broker
            reports, else 3 s.
        backoff_max_s: the longest pause between registration attempts.
        on_secret: push only: receives the signing secret the broker makes at each registration
            (the receiver then checks every push's signature); without it, pushes are not signed
            for this process.
    """

    def __init__(self, template: Template, subscription: Subscription, subscriber_id: str, *,
                 mode: Literal["push", "pull"], url: str | None = None, heartbeat_s: float | None = None,
                 backoff_s: float = 0.2, backoff_max_s: float = 5.0,
                 on_secret: Callable[[str], None] | None = None) -> None:
        self.template = template
        self.on_secret = on_secret
        self.subscription = subscription
        self.subscriber_id = subscriber_id
        self.mode: Literal["push", "pull"] = mode
        self.url = url
        self.heartbeat_s = heartbeat_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.registered = threading.Event()
        #: The broker's last registration answer.
        self.last: Registered | None = None
        #: The last error that is not a broker being down (e.g. a refused push URL), for reporting.
        self.error: ToyMBError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions the broker assigned at the last registration."""
        return self.last.partitions if self.last else ()

    def start(self) -> None:
        """Register in a background thread; returns at once."""
        if self._thread is not None:
            return
        name = f"toymb-{self.subscriber_id}"[:60]
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def register_once(self) -> Registered:
        """One registration attempt; on success, marks this membership registered."""
        sub = self.subscription
        signed = self.mode == "push" and self.on_secret is not None
        # A new secret at every registration (this process cannot know an earlier one); the previous
        # one keeps signing for a while, so pushes already on their way still verify.
        answer = self.template.register(sub.topic, sub.group, mode=self.mode, url=self.url,
                                        subscriber_id=self.subscriber_id, start=sub.start,
                                        new_secret=True if signed else None,
                                        secret_overlap_ms=SECRET_OVERLAP_MS if signed else None,
                                        filter=sub.filter,
                                        dead_letter=None if sub.dead_letter is None else dict(sub.dead_letter))
        secret = answer.raw.get("secret")
        if signed and isinstance(secret, str) and self.on_secret is not None:
            self.on_secret(secret)
        self.last = answer
        self.error = None
        self.registered.set()
        log.info("toymb: registered %s on %s/%s (%d partitions)", self.subscriber_id, sub.topic, sub.group,
                 len(answer.partitions))
        return answer

    def _interval(self) -> float:
        if self.heartbeat_s is not None:
            return self.heartbeat_s
        lease = self.last.raw.get("lease_ms") if self.last else None
        if isinstance(lease, int | float) and lease > 0:
            return max(0.2, lease / 3000)
        return DEFAULT_HEARTBEAT_S

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            if not self.registered.is_set():
                try:
                    self.register_once()
                    failures = 0
                    continue
                except (TransportError, Unavailable) as exc:
                    # The broker is down or starting: normal while it comes up.
                    log.info("toymb: broker not reachable for %s yet (%s); retrying", self.subscriber_id,
                             type(exc).__name__)
                except ToyMBError as exc:
                    self.error = exc
                    log.error("toymb: registering %s failed: %s; retrying", self.subscriber_id, exc)
                failures += 1
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** min(failures, 16))
                self._sleep(delay * random.uniform(0.5, 1.0))
                continue
            self._sleep(self._interval())
            if self._stop.is_set() or not self.registered.is_set():
                continue
            try:
                self.template.heartbeat(self.subscriber_id)
            except NotFound:
                log.warning("toymb: broker forgot subscriber %s; registering again", self.subscriber_id)
                self.registered.clear()
            except ToyMBError as exc:
                log.warning("toymb: heartbeat of %s failed: %s", self.subscriber_id, exc)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def lost(self) -> None:
        """The broker no longer knows this subscriber (e.g. a fetch got 404): register again now."""
        self.registered.clear()
        self._wake.set()

    def stop(self, *, deregister: bool = True, timeout: float = 3.0) -> None:
        """Stop heartbeating and, by default, remove the subscriber so its partitions move now."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if deregister and self.registered.is_set():
            sub = self.subscription
            try:
                self.template.deregister(sub.topic, sub.group, self.subscriber_id, timeout=(1.0, timeout))
                log.info("toymb: deregistered %s", self.subscriber_id)
            except (TransportError, HTTPStatusError) as exc:
                log.warning("toymb: could not deregister %s: %s", self.subscriber_id, exc)
            self.registered.clear()


def on_sigterm(callback: Callable[[], Any]) -> bool:
    """Run ``callback`` on SIGTERM, then whatever SIGTERM did before (by default: exit).

    Only possible from the main thread; returns False (and does nothing) elsewhere.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            callback()
        finally:
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    return True
