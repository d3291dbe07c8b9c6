"""Requests queued while the writer writes a group commit's rows join that commit (``Appender._join``),
on every store: memory, SQLite, PostgreSQL, MariaDB (``store_url``, in this folder's conftest).

The writer is held inside its first transaction, after it took its first request and before it
writes it, by the fence hook every commit runs (:class:`HeldFence`), so what is queued meanwhile
is exactly what can join.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.errors import BadRequest
from broker.outcomes import Stored
from broker.store import AppendTx, MessageStore, Topic, open_store


class HeldFence:
    """The writer's fence hook, passing every topic; its first call holds the writer (inside its
    first transaction, its first requests taken) until :attr:`release` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True

    def lock(self, txn: AppendTx, topics: Sequence[str]) -> None:
        if self._first:
            self._first = False
            self.entered.set()
            assert self.release.wait(30)

    def __call__(self, txn: AppendTx, topic: str) -> None:
        return None


def _msg(msg_id: str, key: str = "k") -> NewMessage:
    return NewMessage(msg_id, key, {}, "text/plain", msg_id.encode())


class Writer:
    """A store, its writer held by a :class:`HeldFence`, and the rows of each commit the writer made."""

    def __init__(self, url: str, max_rows: int = 500) -> None:
        self.store: MessageStore = open_store(url)
        self.store.create_schema()
        self.fence = HeldFence()
        self.commit_rows: list[int] = []
        self.appender = Appender(self.store, max_rows=max_rows, fence=self.fence,
                                 observe_rows=self.commit_rows.append)
        self.appender.start()

    def topic(self, name: str, partitions: int = 4) -> Topic:
        return self.store.ensure_topic(name, partitions)[0]

    def hold(self, topic: Topic, messages: list[NewMessage]) -> Future[list[Stored]]:
        """Submit ``messages``, and wait until the writer holds them inside its first transaction."""
        future = self.appender.submit(topic, messages)
        assert self.fence.entered.wait(30)
        return future


@pytest.fixture
def writer(store_url: str) -> Iterator[Writer]:
    made = Writer(store_url)
    yield made
    made.fence.release.set()
    made.appender.stop()
    made.store.dispose()


def _coordinates(stored: Stored) -> tuple[str, int, int, bool]:
    return stored.id, stored.partition, stored.offset, stored.duplicate


def test_requests_queued_while_rows_are_written_join_the_commit_dense_in_order_and_idempotent(
        writer: Writer) -> None:
    t, u = writer.topic("t"), writer.topic("u")
    first = writer.hold(t, [_msg("a0"), _msg("a1")])
    # Queued while the writer holds the first: the same id again within a request, across
    # requests, and an id of the held request; then another topic (which cannot join: the
    # transaction locked only t), and after it a request for t, which must not overtake it.
    second = writer.appender.submit(t, [_msg("b0"), _msg("a1"), _msg("b0")])
    third = writer.appender.submit(t, [_msg("c0"), _msg("b0")])
    other = writer.appender.submit(u, [_msg("d0")])
    late = writer.appender.submit(t, [_msg("e0")])
    writer.fence.release.set()

    a0, a1 = first.result(30)
    p = a0.partition
    assert [_coordinates(s) for s in (a0, a1)] == [("a0", p, 0, False), ("a1", p, 1, False)]
    assert [_coordinates(s) for s in second.result(30)] == [("b0", p, 2, False), ("a1", p, 1, True),
                                                            ("b0", p, 2, True)]
    assert [_coordinates(s) for s in third.result(30)] == [("c0", p, 3, False), ("b0", p, 2, True)]
    assert _coordinates(late.result(30)[0]) == ("e0", p, 4, False)
    assert other.result(30)[0].offset == 0
    # One commit for t's four new rows; the other topic, and what came after it, in the next.
    assert writer.commit_rows == [4, 2]
    assert writer.appender.commits == 2
    assert [r.id for r in writer.store.read_range("t", p, 0, 100)] == ["a0", "a1", "b0", "c0", "e0"]
    assert writer.store.end_offsets("t")[p] == 5
    assert writer.store.count_messages() == 6


def test_joining_stops_at_the_commit_row_limit(store_url: str) -> None:
    writer = Writer(store_url, max_rows=3)
    try:
        t = writer.topic("t")
        held = writer.hold(t, [_msg("a0"), _msg("a1")])
        joins = writer.appender.submit(t, [_msg("b0"), _msg("b1")])
        waits = writer.appender.submit(t, [_msg("c0"), _msg("c1")])
        writer.fence.release.set()
        offsets = [s.offset for f in (held, joins, waits) for s in f.result(30)]
        assert offsets == list(range(6))
        # Two rows left room for one more request, not for the next.
        assert writer.commit_rows == [4, 2]
    finally:
        writer.appender.stop()
        writer.store.dispose()


# Ids that pass validation and that the database refuses (as in tests/security/test_hostile_input.py).
REFUSED_IDS = {"pg_url": "evil\u0000", "mariadb_url": "evil" + "!" * 256}


@pytest.mark.parametrize("server", sorted(REFUSED_IDS))
def test_a_joined_request_the_store_refuses_fails_alone(request: pytest.FixtureRequest, server: str) -> None:
    writer = Writer(str(request.getfixturevalue(server)))
    try:
        t = writer.topic("t")
        held = writer.hold(t, [_msg("honest-0")])
        evil = writer.appender.submit(t, [_msg(REFUSED_IDS[server])])
        after = writer.appender.submit(t, [_msg("honest-1")])
        writer.fence.release.set()
        outcomes: list[Any] = []
        for future in (held, evil, after):
            try:
                outcomes.append(future.result(30))
            except Exception as exc:  # noqa: BLE001 - asserted on below
                outcomes.append(exc)
        assert isinstance(outcomes[1], BadRequest)
        assert [s.offset for s in outcomes[0] + outcomes[2]] == [0, 1]
        assert writer.store.count_messages("t") == 2
    finally:
        writer.fence.release.set()
        writer.appender.stop()
        writer.store.dispose()
