"""The cap on long polls: how many server threads a node lets wait for messages at once.

A long poll holds a WSGI thread for its whole wait, on the owner that waits for messages and on
a node that forwarded it to the owner alike. Both take a slot here before waiting, so at most
half of the node's threads wait and publishes, commits and ``/health`` always find a thread.
Past the cap a fetch does not wait: it is answered at once with what is there (often nothing),
as a Kafka fetch answers at ``fetch.max.wait.ms`` or a Pub/Sub pull with no messages; the
client simply polls again.
"""

from __future__ import annotations

import threading


class LongPolls:
    """Non-blocking slots for waiting fetches, shared by the whole node."""

    def __init__(self, threads: int) -> None:
        self.limit = max(1, threads // 2)
        self._slots = threading.BoundedSemaphore(self.limit)

    def try_hold(self) -> bool:
        """Take a slot if one is free; the caller must :meth:`release` it after waiting."""
        return self._slots.acquire(blocking=False)

    def release(self) -> None:
        self._slots.release()
