"""Idempotent publishing keeps publisher-given ids in their own table (toymb_message_ids); ids the
broker made up are not indexed. A store made before that table existed is upgraded in place."""

from __future__ import annotations

from sqlalchemy import text

from broker.appender import Appender
from broker.envelope import NewMessage
from broker.store import Store


def _given(i: int) -> NewMessage:
    return NewMessage(f"given-{i}", None, {}, "text/plain", b"x")


def _made_up(i: int) -> NewMessage:
    return NewMessage(f"made-{i}", None, {}, "text/plain", b"x", given_id=False)


def _indexed_ids(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return {row[0] for row in conn.execute(text("SELECT id FROM toymb_message_ids"))}


def test_only_given_ids_are_indexed_and_a_store_from_before_the_table_is_upgraded(database_url: str) -> None:
    store = Store(database_url)
    store.create_schema()
    appender = Appender(store)
    appender.start()
    try:
        topic, _ = store.ensure_topic("orders", 4)
        stored = appender.append(topic, [_given(i) for i in range(20)] + [_made_up(i) for i in range(20)])
        assert not any(s.duplicate for s in stored)
        assert _indexed_ids(store) == {f"given-{i}" for i in range(20)}
    finally:
        appender.stop()

    # A store from before toymb_message_ids: its ids were only in toymb_messages.
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE toymb_message_ids"))
    store.create_schema()
    assert {f"given-{i}" for i in range(20)} <= _indexed_ids(store)

    appender = Appender(store)
    appender.start()
    try:
        again = appender.append(topic, [_given(3), _given(20)])
        assert again[0].duplicate and (again[0].partition, again[0].offset) == (stored[3].partition, stored[3].offset)
        assert not again[1].duplicate
        assert store.count_messages("orders") == 41
    finally:
        appender.stop()
        store.dispose()
