"""Publishes queued without a thread waiting (``Appender.enqueue`` with a ``PendingPublish``):
each hears its own outcome from the writer, once, whatever the others' do."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.errors import BadRequest
from broker.outcomes import Stored
from broker.publish import PendingPublish
from broker.store import open_store
from broker.store.records import Topic
from broker.store.sql import Store


def _msg(msg_id: str) -> NewMessage:
    return NewMessage(msg_id, "k", {}, "text/plain", msg_id.encode())


def _commit_together(url: str, ids: list[str], then: dict[str, object],
                     told_early: list[tuple[str, list[Stored], bool]] | None = None) -> dict[str, PendingPublish]:
    """Queue a publish of each id before the writer runs (so one group commit drains them all).

    With ``told_early``: each publish's ``prepare`` is recorded there, as (id, coordinates,
    whether its outcome was already told)."""
    store = open_store(url)
    store.create_schema()
    topic, _ = store.ensure_topic("t", 4)
    appender = Appender(store)
    told: list[str] = []
    pendings = {}
    for msg_id in ids:
        def answer(pending: PendingPublish, msg_id: str = msg_id) -> None:
            told.append(msg_id)
            if then.get(msg_id) == "raise":
                raise RuntimeError("the answer could not be made")
        def early(pending: PendingPublish, stored: list[Stored], msg_id: str = msg_id) -> None:
            assert told_early is not None
            told_early.append((msg_id, stored, msg_id in told))
        pendings[msg_id] = PendingPublish(0.0, False, answer, early if told_early is not None else None)
        appender.enqueue(topic, [_msg(msg_id)], pendings[msg_id])
    appender.start()
    appender.stop()   # after the queued requests: they are all answered when it returns
    assert sorted(told) == sorted(ids), "each publish is told its outcome once"
    assert store.count_messages("t") == sum(1 for p in pendings.values() if p.stored)
    store.dispose()
    return pendings


def test_a_failing_answer_keeps_no_other_publish_from_its_own(tmp_path: Path) -> None:
    pendings = _commit_together(f"sqlite:///{tmp_path / 'toymb.db'}", ["a", "b", "c"], {"a": "raise"})
    assert all(p.error is None and p.stored is not None for p in pendings.values())
    assert sorted(p.stored[0].offset for p in pendings.values() if p.stored) == [0, 1, 2]


def test_a_publish_the_store_refuses_hears_it_alone(request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("pg_url"))
    evil = "evil\u0000"   # passes validation; PostgreSQL refuses a NUL in text
    pendings = _commit_together(url, ["honest-0", evil, "honest-1"], {})
    assert isinstance(pendings[evil].error, BadRequest) and pendings[evil].stored is None
    assert pendings["honest-0"].stored is not None and pendings["honest-1"].stored is not None


def test_coordinates_told_before_the_commit_are_the_ones_it_committed(request: pytest.FixtureRequest) -> None:
    # An answer made from what ``prepare`` told (while the commit syncs) must be the committed
    # one: told before the outcome, the very list the outcome then gives. A group commit that
    # fails (PostgreSQL refuses the NUL) is redone one by one: the redo's coordinates are told
    # again, and the refused publish is never told any.
    url = str(request.getfixturevalue("pg_url"))
    evil = "evil\u0000"
    early: list[tuple[str, list[Stored], bool]] = []
    pendings = _commit_together(url, ["honest-0", evil, "honest-1"], {}, early)
    assert evil not in [msg_id for msg_id, _, _ in early]
    for msg_id in ("honest-0", "honest-1"):
        last = [(stored, late) for told_id, stored, late in early if told_id == msg_id][-1]
        assert last[0] is pendings[msg_id].stored and not last[1]


def test_coordinates_told_before_the_commit_on_sqlite(tmp_path: Path) -> None:
    early: list[tuple[str, list[Stored], bool]] = []
    pendings = _commit_together(f"sqlite:///{tmp_path / 'toymb.db'}", ["a", "b", "c"], {}, early)
    assert sorted(msg_id for msg_id, _, _ in early) == ["a", "b", "c"]
    assert all(stored is pendings[msg_id].stored and not late for msg_id, stored, late in early)


def _store_refusing_long_values(path: Path) -> tuple[Store, Topic]:
    """A SQLite store with a topic "t" of 4 partitions whose writer refuses a value over 4,000
    bytes (its connection's length limit lowered): the writer's statements then raise sqlite3's
    own error for that publish alone."""
    store = Store(f"sqlite:///{path / 'toymb.db'}")
    store.create_schema()
    topic, _ = store.ensure_topic("t", 4)
    with store.append_transaction():
        pass   # opens the writer's own connection, kept between transactions
    assert store._writer_conn is not None
    writer = store._writer_conn.connection.dbapi_connection
    assert isinstance(writer, sqlite3.Connection)
    writer.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4000)
    return store, topic


def test_a_value_sqlite_refuses_fails_only_its_publish_as_a_bad_request(tmp_path: Path) -> None:
    # The SQLite writer's statements raise sqlite3's own errors (no SQLAlchemy wrapper): a value
    # SQLite refuses (a body over its length limit, lowered here on the writer's connection) is
    # still the publisher's 400, and the publishes committed with it are stored.
    store, topic = _store_refusing_long_values(tmp_path)
    appender = Appender(store)
    pendings = {}
    for msg_id, size in (("ok-0", 10), ("big", 5000), ("ok-1", 10)):
        pendings[msg_id] = PendingPublish(0.0, False, lambda pending: None)
        appender.enqueue(topic, [NewMessage(msg_id, None, {}, "text/plain", b"x" * size)], pendings[msg_id])
    appender.start()
    appender.stop()
    error = pendings["big"].error
    assert isinstance(error, BadRequest) and error.code == "bad_value" and pendings["big"].stored is None
    assert pendings["ok-0"].stored is not None and pendings["ok-1"].stored is not None
    assert store.count_messages("t") == 2
    store.dispose()


class RecordingTeller:
    """A :class:`broker.outcomes.Teller` that records what the writer told it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[PendingPublish, list[Stored]]]]] = []

    def prepare_all(self, told: list[tuple[PendingPublish, list[Stored]]], /) -> None:
        self.calls.append(("prepare", list(told)))

    def set_results(self, told: list[tuple[PendingPublish, list[Stored]]], /) -> None:
        for pending, stored in told:
            pending.stored = stored
        self.calls.append(("result", list(told)))


def _told_by_teller(path: Path, bodies: dict[str, int]) -> tuple[RecordingTeller, dict[str, PendingPublish], list[str]]:
    """Queue a publish of each id (its body that many bytes; SQLite refuses one over 4,000) with
    one teller, before the writer runs."""
    store, topic = _store_refusing_long_values(path)
    appender = Appender(store)
    teller = RecordingTeller()
    alone: list[str] = []
    pendings: dict[str, PendingPublish] = {}
    for msg_id, size in bodies.items():
        def told_alone(_pending: PendingPublish, msg_id: str = msg_id) -> None:
            alone.append(msg_id)

        pendings[msg_id] = PendingPublish(0.0, False, told_alone, teller=teller)
        appender.enqueue(topic, [NewMessage(msg_id, None, {}, "text/plain", b"x" * size)], pendings[msg_id])
    appender.start()
    appender.stop()
    assert store.count_messages("t") == sum(1 for p in pendings.values() if p.stored is not None)
    store.dispose()
    return teller, pendings, alone


def test_a_teller_hears_a_whole_commit_at_once_before_and_after_its_sync(tmp_path: Path) -> None:
    # One commit of three publishes: the teller is told their coordinates once before the sync
    # and once after it, in queue order, the very lists both times; no publish is told alone.
    teller, pendings, alone = _told_by_teller(tmp_path, {"a": 10, "b": 10, "c": 10})
    assert [kind for kind, _ in teller.calls] == ["prepare", "result"]
    (_, before), (_, after) = teller.calls
    assert [pending for pending, _ in before] == [pendings["a"], pendings["b"], pendings["c"]]
    assert [(p, s) for p, s in after] == before and all(p.stored is s for p, s in after)
    assert alone == []
    coordinates = {(s[0].partition, s[0].offset) for _, s in after}
    assert len(coordinates) == 3, "each publish has coordinates of its own"


def test_with_a_teller_a_refused_publish_still_hears_alone_and_the_others_are_stored(tmp_path: Path) -> None:
    # SQLite refuses the big body (its length limit lowered on the writer's connection): the
    # group commit is redone one by one; the refused publish hears its 400 through its own
    # ``then``, and each other publish is told through the teller, after its own commit.
    teller, pendings, alone = _told_by_teller(tmp_path, {"ok-0": 10, "big": 5000, "ok-1": 10})
    assert alone == ["big"]
    error = pendings["big"].error
    assert isinstance(error, BadRequest) and error.code == "bad_value" and pendings["big"].stored is None
    results = [told for kind, told in teller.calls if kind == "result"]
    assert [[p for p, _ in told] for told in results] == [[pendings["ok-0"]], [pendings["ok-1"]]]
    assert pendings["ok-0"].stored is not None and pendings["ok-1"].stored is not None
