"""One contract for the message store, run on its in-memory twin, on SQLite and on PostgreSQL
(``store_url``, in this folder's conftest)."""

from __future__ import annotations

import threading
from pathlib import Path

from broker.appender import Appender
from broker.envelope import NewMessage, render_row
from broker.partitioning import partition_for
from broker.store import MessageStore, open_store
from broker.store.sql import Store


def _msg(i: int, key: str | None = None, body: bytes = b"x") -> NewMessage:
    return NewMessage(f"id-{i}", key, {"h": str(i)}, "application/octet-stream", body)


def _open(url: str) -> tuple[MessageStore, Appender]:
    store = open_store(url)
    store.create_schema()
    appender = Appender(store, max_rows=500)
    appender.start()
    return store, appender


def test_topic_registry(store_url: str) -> None:
    store, appender = _open(store_url)
    try:
        topic, created = store.ensure_topic("orders", 7)
        assert created and topic.partitions == 7
        again, created_again = store.ensure_topic("orders", 100)
        assert not created_again and again.partitions == 7
        store.ensure_topic("alpha", 1)
        assert [t.name for t in store.list_topics()] == ["alpha", "orders"]
        assert store.get_topic("missing") is None
        assert store.end_offsets("orders") == {p: 0 for p in range(7)}
    finally:
        appender.stop()
        store.dispose()


def test_append_assigns_dense_offsets_per_partition_and_reads_back(store_url: str) -> None:
    store, appender = _open(store_url)
    try:
        topic, _ = store.ensure_topic("t", 4)
        stored = appender.append(topic, [_msg(i, key=f"k{i % 3}", body=bytes([i % 256]) * 10) for i in range(60)])
        for s, i in zip(stored, range(60), strict=True):
            assert s.partition == partition_for(f"k{i % 3}", 4)
        by_partition: dict[int, list[int]] = {}
        for s in stored:
            by_partition.setdefault(s.partition, []).append(s.offset)
        for offsets in by_partition.values():
            assert offsets == list(range(len(offsets)))
        ends = store.end_offsets("t")
        assert sum(ends.values()) == 60
        first = stored[0]
        rows = [render_row(r) for r in store.read_range("t", first.partition, 0, 1000)]
        assert [r["offset"] for r in rows] == list(range(ends[first.partition]))
        assert rows[0]["id"] == "id-0" and rows[0]["body_base64"] == "AAAAAAAAAAAAAA=="
        assert rows[0]["headers"] == {"h": "0"} and rows[0]["content_type"] == "application/octet-stream"
        assert store.read_range("t", first.partition, 1, 1)[0].offset == 1
    finally:
        appender.stop()
        store.dispose()


def test_same_id_is_stored_once(store_url: str) -> None:
    store, appender = _open(store_url)
    try:
        topic, _ = store.ensure_topic("t", 3)
        first = appender.append(topic, [_msg(1), _msg(1), _msg(2)])
        assert [s.duplicate for s in first] == [False, True, False]
        assert (first[0].partition, first[0].offset) == (first[1].partition, first[1].offset)
        again = appender.append(topic, [_msg(2)])
        assert again[0].duplicate and (again[0].partition, again[0].offset) == (first[2].partition, first[2].offset)
        assert store.count_messages("t") == 2
        # The same id in another topic is another message.
        other, _ = store.ensure_topic("u", 3)
        assert not appender.append(other, [_msg(1)])[0].duplicate
    finally:
        appender.stop()
        store.dispose()


def test_concurrent_appends_share_commits_and_stay_dense(store_url: str) -> None:
    store, appender = _open(store_url)
    try:
        topic, _ = store.ensure_topic("t", 2)
        results: list[list[int]] = []
        lock = threading.Lock()

        def worker(w: int) -> None:
            for j in range(20):
                s = appender.append(topic, [_msg(w * 1000 + j, key="same")])
                with lock:
                    results.append([s[0].offset])

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        offsets = sorted(o for r in results for o in r)
        assert offsets == list(range(160))
        assert appender.commits < 160  # group commit: requests shared transactions
        assert store.end_offsets("t")[partition_for("same", 2)] == 160
    finally:
        appender.stop()
        store.dispose()


def test_a_new_writer_continues_after_the_last_offset(store_url: str) -> None:
    store, appender = _open(store_url)
    topic, _ = store.ensure_topic("t", 1)
    appender.append(topic, [_msg(i) for i in range(5)])
    appender.stop()
    store.dispose()
    store2, appender2 = _open(store_url)
    try:
        stored = appender2.append(topic, [_msg(10)])
        assert stored[0].offset == 5
    finally:
        appender2.stop()
        store2.dispose()


def test_text_and_bytes_that_bulk_load_formats_treat_specially_read_back_unchanged(store_url: str) -> None:
    """PostgreSQL's writer loads rows with COPY, whose text format gives tab, newline, backslash and
    ``\\N`` a meaning: a message made of them (and every byte value) must come back as it went in."""
    tricky = "a\tb\nc\rd\\e\\N\\.'\"é😀"
    body = bytes(range(256)) + b"\\N\t\n\\."
    message = NewMessage(f"id\t{tricky}", f"key {tricky}", {f"h\t{tricky}": tricky, "empty": ""},
                         "text/plain; charset=\"utf-8\"", body)
    null_key = NewMessage("plain", None, {}, "application/octet-stream", b"")
    # Past the size up to which the SQLite writer binds a copy of the body (broker.store.append.sqlite_message_row).
    large = NewMessage("large", None, {}, "application/octet-stream", bytes(range(256)) * 17)
    store, appender = _open(store_url)
    try:
        topic, _ = store.ensure_topic("tricky", 1)
        stored = appender.append(topic, [message, null_key, large])
        rows = store.read_range("tricky", 0, 0, 10)
        assert [(r.offset, r.id, r.key) for r in rows] == [(0, message.id, message.key), (1, "plain", None),
                                                           (2, "large", None)]
        assert bytes(rows[0].body) == body and bytes(rows[1].body) == b"" and bytes(rows[2].body) == large.body
        assert render_row(rows[0])["headers"] == message.headers
        assert rows[0].content_type == message.content_type
        assert [s.offset for s in stored] == [0, 1, 2]
    finally:
        appender.stop()
        store.dispose()


def test_sqlite_lazy_commits_skip_only_their_own_sync(tmp_path: Path) -> None:
    """Push delivery's offset commits run on a connection of their own with synchronous=NORMAL;
    every other write keeps FULL, and what a lazy commit wrote is in the database file's log."""
    url = f"sqlite:///{tmp_path / 'toymb.db'}"
    store = open_store(url)
    assert isinstance(store, Store)
    store.create_schema()
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        lazy = store.lazy_engine()
        assert lazy is not store.engine and store.lazy_engine() is lazy
        with lazy.begin() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            conn.exec_driver_sql("CREATE TABLE lazy_probe (n INTEGER)")
            conn.exec_driver_sql("INSERT INTO lazy_probe VALUES (7)")
    finally:
        store.dispose()
    reopened = open_store(url)
    assert isinstance(reopened, Store)
    try:
        with reopened.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT n FROM lazy_probe").scalar() == 7
    finally:
        reopened.dispose()
