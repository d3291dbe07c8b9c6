"""What the group-commit writer (:mod:`broker.appender`) tells publishers: where each message is
stored (:class:`Stored`), through an :class:`Outcome` per request or a :class:`Teller` per commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

__all__ = ["Outcome", "Prepare", "Stored", "Teller"]


class Outcome(Protocol):
    """What the writer tells a queued request's publisher, once: its coordinates, or why it failed.

    A :class:`~concurrent.futures.Future` is one; so is a lighter object that only passes the word
    on (:class:`broker.publish.PendingPublish`): a Future's lock and condition cost the writer more
    per request than the request's own row.
    """

    def set_result(self, result: list[Stored], /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


class Stored(msgspec.Struct, frozen=True, gc=False):
    """Where a message is stored; ``duplicate`` when its id was stored before (these are the first coordinates)."""

    # A msgspec Struct, not a named tuple: the writer makes one per message, and its constructor
    # is native (about a third of the named tuple's), and a committed publish's answer is
    # encoded from it natively (:func:`broker.api.fast_json.stored_answer_bytes`) instead of through a
    # dict per message. Its fields are the answer's keys, in the answer's order. No reference
    # cycle can go through it (strings, ints, a bool), so the garbage collector does not track it.
    id: str
    topic: str
    partition: int
    offset: int
    duplicate: bool = False

    def coordinates(self) -> dict[str, Any]:
        return {"id": self.id, "topic": self.topic, "partition": self.partition, "offset": self.offset}

    def answer(self) -> dict[str, Any]:
        """The coordinates a publisher is answered, with ``duplicate``."""
        return {"id": self.id, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                "duplicate": self.duplicate}


# An outcome may also have ``prepare(coordinates)``: the writer calls it with the request's
# coordinates once its rows are written, just before the commit, so that whoever answers can make
# the answer while the commit syncs (the sync holds no GIL). The commit may still fail: only
# ``set_result`` says it did not, and only then may the answer be sent.
Prepare = Callable[[list[Stored]], None]

class Teller(Protocol):
    """Tells the outcomes of one commit's requests at once, for the outcomes that name it (an
    outcome's optional ``teller`` attribute): :class:`broker.api.fast_publish.PublishFastPath`'s,
    which hands all of a commit's answers to the server's loop in one go.

    Per request, ``prepare`` and ``set_result`` were a chain of calls and a lock each, on the
    single writer's thread: about 8 µs a publish, most of the writer's own Python. A teller is
    told a commit's outcomes in one call, in queue order; it must tell each outcome it is given
    (a teller that raises is logged, and the outcomes it did not tell would never hear). A failure
    still reaches each request alone, through its own ``set_exception``.
    """

    def prepare_all(self, told: list[tuple[Any, list[Stored]]], /) -> None:
        """What ``outcome.prepare(stored)`` would do, for each (outcome, stored)."""

    def set_results(self, told: list[tuple[Any, list[Stored]]], /) -> None:
        """What ``outcome.set_result(stored)`` would do, for each (outcome, stored)."""
