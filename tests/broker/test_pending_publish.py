"""Publishes queued without a thread waiting (``Appender.enqueue`` with a ``PendingPublish``):
each hears its own outcome from the writer, once, whatever the others' do."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.errors import BadRequest
from broker.publish import PendingPublish
from broker.store import open_store


def _msg(msg_id: str) -> NewMessage:
    return NewMessage(msg_id, "k", {}, "text/plain", msg_id.encode())


def _commit_together(url: str, ids: list[str], then: dict[str, object]) -> dict[str, PendingPublish]:
    """Queue a publish of each id before the writer runs (so one group commit drains them all)."""
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
        pendings[msg_id] = PendingPublish(0.0, False, answer)
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
