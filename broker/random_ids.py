"""Fresh message ids: 128 random bits each, from the system's random source read for many at once."""

from __future__ import annotations

import os
import threading


class _RandomPool:
    """The system's random bytes, read ``IDS`` ids at a time, as hex, handed out once each.

    A read of the random source is a system call, and a single publish makes one id: one read per
    publish cost more than the rest of its id (and several times that on a loaded machine). A
    batch takes its ids from the pool too: ``os.urandom`` lets go of the GIL for its system call,
    and a worker thread that lets go of it while the writer or the loop holds it waits to get it
    back (two thread switches), once per batch when each batch read its own.
    """

    IDS = 2048   # 32 KiB of random bytes a read (64 KiB of hex digits held)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hex = ""
        self._at = 0
        os.register_at_fork(after_in_child=self._forget)   # a child must never hand out the parent's

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._hex, self._at = "", 0

    def take(self, count: int) -> tuple[str, int]:
        """Hex digits holding ``count`` unused ids of 32 digits, from the returned index on."""
        size = 32 * count
        if count > self.IDS // 4:
            return os.urandom(16 * count).hex(), 0   # a batch of over 512: a read of its own
        with self._lock:
            if self._at + size > len(self._hex):
                self._hex, self._at = os.urandom(16 * self.IDS).hex(), 0
            at = self._at
            self._at = at + size
            return self._hex, at


_random_pool = _RandomPool()


def new_ids(count: int) -> list[str]:
    """``count`` fresh message ids: 128 random bits each, as a UUID4 has (less its 6 fixed ones).

    From the system's random source, read for many ids at once (:class:`_RandomPool`).
    """
    pool, at = _random_pool.take(count)
    if count == 1:   # a single publish: no comprehension (a function call of its own in 3.11)
        return [pool[at : at + 32]]
    return [pool[i : i + 32] for i in range(at, at + 32 * count, 32)]
