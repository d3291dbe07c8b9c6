"""One contract for the journal's and retention's repository (``JournalRepository``), run on
memory, SQLite and PostgreSQL."""

from __future__ import annotations

from broker.appender import Appender
from broker.store import Repositories, now_ms
from broker.store.journal import ROW_COLUMNS
from tests.broker.conftest import fill, key_for, message

HOUR_MS = 3_600_000


def test_end_offsets_and_ranges_read_in_pages(repos: Repositories, appender: Appender) -> None:
    journal = repos.journal
    topic, _ = repos.messages.ensure_topic("t", 2)
    repos.messages.ensure_topic("empty", 1)
    fill(appender, topic, {0: 7, 1: 2})
    assert journal.end_offsets() == {("t", 0): 7, ("t", 1): 2, ("empty", 0): 0}

    pages = list(journal.read_ranges([("t", 0, 0, 7), ("empty", 0, 0, 0), ("t", 1, 1, 2)], page_rows=3))
    assert [len(page) for page in pages] == [3, 3, 1, 1]
    rows = [dict(zip(ROW_COLUMNS, row, strict=True)) for page in pages for row in page]
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [("t", 0, o) for o in range(7)] + [("t", 1, 1)]
    first = rows[0]
    assert (first["id"], first["key"], first["headers"], first["content_type"], bytes(first["body"])) == (
        "id-0", key_for(0, 2), '{"h":"0"}', "application/octet-stream", b"x")
    assert isinstance(first["timestamp"], int) and abs(first["timestamp"] - now_ms()) < 60_000
    assert [row[3] for page in journal.read_ranges([("t", 0, 2, 5)]) for row in page] == [2, 3, 4]


def test_journaled_offsets_never_move_back(repos: Repositories) -> None:
    journal = repos.journal
    assert journal.journaled_offsets() == {}
    journal.record_journaled({("t", 0): 5})
    journal.record_journaled({("t", 0): 3, ("t", 1): 2})
    assert journal.journaled_offsets() == {("t", 0): 5, ("t", 1): 2}
    journal.record_journaled({("t", 0): 7})
    journal.record_journaled({})
    assert journal.journaled_offsets() == {("t", 0): 7, ("t", 1): 2}


def test_retention_limits_are_the_journaled_offsets_lowered_to_every_groups_commit(
        repos: Repositories, appender: Appender) -> None:
    journal, groups = repos.journal, repos.groups
    topic, _ = repos.messages.ensure_topic("t", 3)
    fill(appender, topic, {0: 10, 1: 10, 2: 10})
    assert journal.retention_limits("t", 3) == {}, "nothing is journaled"
    journal.record_journaled({("t", 0): 8, ("t", 1): 4})
    assert journal.retention_limits("t", 3) == {0: 8, 1: 4}, "a topic without groups counts as consumed"

    for group in ("slow", "fast"):
        groups.register("t", 3, group, f"{group}-1", mode="pull", url=None, compat=False,
                        lease_until_ms=now_ms() + 60_000, start="earliest", max_members=10)
    groups.commit("t", "fast", {0: 10, 1: 10, 2: 10})
    assert journal.retention_limits("t", 3) == {}, "a group that acknowledged nothing keeps everything"
    groups.commit("t", "slow", {0: 3, 1: 9})
    assert journal.retention_limits("t", 3) == {0: 3, 1: 4}
    assert journal.retention_limits("other", 3) == {}


def test_delete_expired_removes_only_old_rows_in_the_range_and_readers_see_it(
        repos: Repositories, appender: Appender) -> None:
    journal, store = repos.journal, repos.messages
    topic, _ = store.ensure_topic("t", 2)
    old = now_ms() - 2 * HOUR_MS
    key = key_for(0, 2)
    appender.append(topic, [message(i, key, timestamp=old if i < 6 else None) for i in range(8)])
    cutoff = now_ms() - HOUR_MS
    assert journal.lowest_offset("t", 0) == 0 and journal.lowest_offset("t", 1) is None

    assert journal.delete_expired("t", 0, 0, 4, cutoff) == 4
    assert journal.lowest_offset("t", 0) == 4
    assert journal.delete_expired("t", 0, 4, 8, cutoff) == 2, "young rows stay"
    assert journal.delete_expired("t", 0, 0, 8, cutoff) == 0
    assert journal.lowest_offset("t", 0) == 6
    assert [r.offset for r in store.read_range("t", 0, 0, 10)] == [6, 7]
    assert store.count_messages("t") == 2 and store.end_offsets("t") == {0: 8, 1: 0}
    assert [row[3] for page in journal.read_ranges([("t", 0, 0, 8)], page_rows=2) for row in page] == [6, 7]
    # Once its row is gone, an id is free again: publishing it stores a new message.
    again = appender.append(topic, [message(0, key)])[0]
    assert not again.duplicate and again.offset == 8
    # An id whose row retention kept stays taken.
    kept = appender.append(topic, [message(6, key)])[0]
    assert kept.duplicate and (kept.partition, kept.offset) == (0, 6)
