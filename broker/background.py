"""A node service's background thread: started once, told to stop, joined with a bound."""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_TIMEOUT_S = 10.0


class Worker:
    """One named daemon thread running ``target``, which watches :attr:`stopping`.

    :attr:`wake` interrupts a wait early (it is also set by :meth:`stop`).
    """

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.name = name
        self._target = target
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start the thread (a no-op while it runs)."""
        if self._thread is not None:
            return
        self.stopping.clear()
        self._thread = threading.Thread(target=self._target, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Tell the thread to stop, and wait for it (at most :data:`JOIN_TIMEOUT_S`)."""
        self.stopping.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)
            self._thread = None
