"""One contract for consumer groups (``GroupRepository``), run on memory, SQLite and PostgreSQL.

The rules live once in ``GroupStore``; these tests hold each database's primitives to them: joins
and their limits, rebalances, leases, commits, lags and the fair windowed read.
"""

from __future__ import annotations

import pytest

from broker.appender import Appender
from broker.errors import Conflict, LimitExceeded
from broker.store import GroupRepository, Repositories, Subscriber, Topic, now_ms
from broker.store.groups import group_tables
from tests.broker.conftest import fill

HOUR_MS = 3_600_000


def _join(groups: GroupRepository, topic: Topic, sid: str, *, group: str = "g", mode: str = "pull",
          lease_ms: int = 60_000, start: str = "earliest", max_members: int = 10) -> list[int]:
    """Register ``sid`` in ``group``; its partitions."""
    _, partitions = groups.register(topic.name, topic.partitions, group, sid, mode=mode, url=None, compat=False,
                                    lease_until_ms=now_ms() + lease_ms, start=start, max_members=max_members)
    return partitions


def test_register_refuses_another_group_and_a_full_group(repos: Repositories) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 4)
    assert _join(groups, topic, "a", max_members=2) == [0, 1, 2, 3]
    found = groups.get("a")
    assert found is not None and (found.topic, found.group, found.mode) == ("t", "g", "pull") and found.live()
    assert groups.topic_of("a") == "t" and groups.topic_of("nobody") is None and groups.get("nobody") is None

    with pytest.raises(Conflict) as other_group:
        _join(groups, topic, "a", group="h")
    assert other_group.value.code == "subscriber_exists"
    assert groups.get("a") == found, "a refused registration changes nothing"

    _join(groups, topic, "b", max_members=2)
    with pytest.raises(LimitExceeded):
        _join(groups, topic, "c", max_members=2)
    assert groups.get("c") is None
    # Registering again refreshes a member, which does not count against the limit.
    _join(groups, topic, "a", max_members=2, lease_ms=120_000)
    refreshed = groups.get("a")
    assert refreshed is not None and refreshed.lease_until_ms > found.lease_until_ms
    # An expired member does not count either.
    _join(groups, topic, "b", max_members=2, lease_ms=-1000)
    _join(groups, topic, "c", max_members=2)
    assert [m.id for m in groups.members("t", "g")] == ["a", "b", "c"]


def test_a_join_stores_its_member_and_partitions_together_or_nothing(repos: Repositories) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 4)
    joined, partitions = groups.register("t", 4, "g", "a", mode="push", url="http://127.0.0.1:9/p", compat=False,
                                         lease_until_ms=now_ms() + 60_000, start="earliest", max_members=10)
    assert groups.get("a") == joined, "the subscriber answered is the one stored"
    assert partitions == [0, 1, 2, 3] and groups.assignment("t", "g") == dict.fromkeys(range(4), "a")

    # Another registration took the id between the check and the insert (two nodes during an
    # ownership change): the join writes nothing, and the group keeps its assignment.
    tables = group_tables(repos.messages)
    late = Subscriber("a", "t", "h", "pull", None, False, now_ms() + 60_000)
    assert tables.join(late, now_ms(), now_ms(), lambda live, current: dict.fromkeys(range(4), "a")) is None
    assert groups.get("a") == joined and groups.assignment("t", "h") == {} and groups.members("t", "h") == []


def test_rebalance_gives_every_partition_to_live_subscribers_only(repos: Repositories) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 6)
    _join(groups, topic, "dead", lease_ms=-1000)
    for sid in ("a", "b", "c"):
        _join(groups, topic, sid)
    held = groups.assignment("t", "g")
    assert sorted(held) == list(range(6)) and sorted(held.values()) == ["a", "a", "b", "b", "c", "c"]
    assert groups.partitions_of("a") == sorted(p for p, s in held.items() if s == "a")
    assert groups.partitions_of("dead") == []
    assert groups.stale_groups(now_ms()) == []

    revoked = groups.revoke("c")   # the caller rebalances: until then c holds its partitions
    assert revoked is not None and revoked.revoked and not revoked.live()
    assert groups.stale_groups(now_ms()) == [("t", "g")]
    after = groups.rebalance("t", 6, "g")
    assert after == groups.assignment("t", "g")
    assert sorted(after) == list(range(6)) and set(after.values()) == {"a", "b"}
    assert groups.stale_groups(now_ms()) == []

    assert groups.remove("t", 6, "g", "b") is True
    assert set(groups.assignment("t", "g").values()) == {"a"} and len(groups.assignment("t", "g")) == 6
    assert groups.remove("t", 6, "g", "b") is False
    assert groups.remove("t", 6, "other", "a") is False, "only a member of that group is removed"


def test_leases_renew_expire_revoke_and_purge(repos: Repositories) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 2)
    _join(groups, topic, "x", lease_ms=60_000)
    _join(groups, topic, "late", lease_ms=-500)
    _join(groups, topic, "pusher", group="p", mode="push")
    x = groups.get("x")
    assert x is not None

    same, expired = groups.renew("x", x.lease_until_ms - 1000)
    assert same == x and not expired, "a lease is never shortened"
    longer, expired = groups.renew("x", x.lease_until_ms + 1000)
    assert longer is not None and longer.lease_until_ms == x.lease_until_ms + 1000 and not expired
    assert groups.renew("nobody", now_ms()) == (None, False)

    at = now_ms()
    assert groups.expired_between(at - 5000, at + 1) == [("t", "g")]
    assert groups.expired_between(at - 100, at + 1) == []
    assert sorted(groups.live_groups()) == [("t", "g"), ("t", "p")]
    assert groups.live_groups("push") == [("t", "p")]
    revived, expired = groups.renew("late", now_ms() + 60_000)
    assert revived is not None and revived.live() and expired, "an expired subscriber rejoins"

    groups.revoke("x")
    assert groups.purge(now_ms() - HOUR_MS) == 0, "the revoked are remembered for an hour"
    assert groups.purge(now_ms() + 1) == 1
    assert groups.get("x") is None and [m.id for m in groups.members("t", "g")] == ["late"]


def test_commit_never_moves_back_and_counts_newly_acknowledged(repos: Repositories, appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 2)
    fill(appender, topic, {0: 6, 1: 4})
    _join(groups, topic, "early", start="earliest")
    _join(groups, topic, "late", group="h", start="latest")
    assert groups.committed("t", "g") == {0: 0, 1: 0}
    assert groups.committed("t", "h") == {0: 6, 1: 4}
    assert sorted(groups.all_groups()) == [("t", "g"), ("t", "h")]
    assert "t" in groups.take_offsets_moved() and groups.take_offsets_moved() == set()

    assert groups.commit("t", "g", {0: 3}) == 3
    assert groups.commit("t", "g", {0: 2}) == 0 and groups.committed("t", "g") == {0: 3, 1: 0}
    assert groups.take_offsets_moved() == {"t"}
    assert groups.commit("t", "g", {0: 3}) == 0 and groups.take_offsets_moved() == set()
    assert groups.commit("t", "g", {0: 5, 1: 1}) == 3
    assert groups.commit("t", "g", {}) == 0
    assert groups.commit("t", "g", {7: 5}) == 0, "a partition without a committed offset is not created"
    assert groups.committed("t", "g") == {0: 5, 1: 1}
    # A new group's offsets are set once: registering again does not move them.
    _join(groups, topic, "early2", start="latest")
    assert groups.committed("t", "g") == {0: 5, 1: 1}
    # A commit that need not wait for the disk (push delivery's) follows the same rules, and every
    # reader sees it at once.
    assert groups.commit("t", "g", {0: 4, 1: 3}, durable=False) == 2
    assert groups.committed("t", "g") == {0: 5, 1: 3}


def test_lags_follow_the_end_offsets_and_the_commits(repos: Repositories, appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 3)
    other, _ = repos.messages.ensure_topic("u", 1)
    _join(groups, topic, "a", start="earliest")
    _join(groups, topic, "b", group="h", start="earliest")
    _join(groups, other, "c", start="earliest")
    assert groups.lags([("t", "g"), ("t", "h")]) == {("t", "g"): 0, ("t", "h"): 0}
    fill(appender, topic, {0: 5, 1: 3, 2: 2})
    fill(appender, other, {0: 4}, first_id=100)
    assert groups.lags([("t", "g"), ("u", "g"), ("t", "nogroup")]) == {("t", "g"): 10, ("u", "g"): 4}
    groups.commit("t", "g", {0: 5, 2: 1})
    assert groups.lags([("t", "g"), ("t", "h")]) == {("t", "g"): 4, ("t", "h"): 10}
    assert groups.lags([]) == {}
    # The lagging partitions themselves, (committed, end), in one read; caught-up ones are left out.
    assert groups.lagging([("t", "g"), ("u", "g"), ("t", "nogroup")]) == {
        ("t", "g"): {1: (0, 3), 2: (1, 2)}, ("u", "g"): {0: (0, 4)}}
    assert groups.lagging([]) == {}


def test_read_is_fair_across_partitions(repos: Repositories, appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 3)
    fill(appender, topic, {0: 10, 1: 10, 2: 1})
    ends = repos.messages.end_offsets("t")

    rows = groups.read("t", {0: 0, 1: 0, 2: 0}, 6, ends)
    assert [(r.partition, r.offset) for r in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)], \
        "an equal share each; the unused budget goes to the partitions that had more, fairly trimmed"
    rows = groups.read("t", {0: 4, 1: 0, 2: 1}, 6, ends)
    assert [(r.partition, r.offset) for r in rows] == [(0, 4), (0, 5), (0, 6), (1, 0), (1, 1), (1, 2)]
    assert rows[0].id == "id-4" and bytes(rows[0].body) == b"x"
    assert groups.read("t", {0: 10}, 5, ends) == [] and groups.read("t", {0: 0}, 0, ends) == []


def test_read_with_max_bytes_takes_a_prefix_of_every_partition(repos: Repositories, appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 2)
    fill(appender, topic, {0: 5, 1: 5}, body=b"b" * 200)
    whole = groups.read("t", {0: 0, 1: 0}, 10)
    weight = 200 + len('{"h":"0"}') + len("id-0") + len("k0") + len("application/octet-stream")
    assert len(whole) == 10
    capped = groups.read("t", {0: 0, 1: 0}, 10, max_bytes=3 * weight + 10)
    assert [(r.partition, r.offset) for r in capped] == [(0, 0), (0, 1), (1, 0)], \
        "first messages of every partition before second ones, within the byte cap"
    alone = groups.read("t", {0: 2, 1: 0}, 10, max_bytes=1)
    assert [(r.partition, r.offset) for r in alone] == [(0, 2)], "a message over the cap still goes, alone"


def test_read_goes_on_after_rows_retention_deleted(repos: Repositories, appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 2)
    old = now_ms() - 2 * HOUR_MS
    fill(appender, topic, {0: 8, 1: 3}, timestamp=old)
    ends = repos.messages.end_offsets("t")
    assert repos.journal.delete_expired("t", 0, 0, 5, now_ms() - HOUR_MS) == 5
    rows = groups.read("t", {0: 0, 1: 1}, 4, ends)
    assert [(r.partition, r.offset) for r in rows] == [(0, 5), (0, 6), (1, 1), (1, 2)]
    assert groups.read("t", {0: 0}, 4) == [], "without the end offsets a gap reads as the end"
    assert [r.offset for r in repos.messages.read_range("t", 0, 0, 10)] == [5, 6, 7]


def test_seek_sets_offsets_back_and_forward_and_finds_offsets_by_time(repos: Repositories,
                                                                        appender: Appender) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 3)
    base = now_ms()
    fill(appender, topic, {0: 3}, timestamp=base - 3000)
    fill(appender, topic, {0: 2, 1: 2}, first_id=10, timestamp=base)
    _join(groups, topic, "a", start="latest")
    assert groups.committed("t", "g") == {0: 5, 1: 2, 2: 0}
    groups.seek("t", "g", {0: 1, 2: 0})
    assert groups.committed("t", "g") == {0: 1, 1: 2, 2: 0}, "a seek moves back; other partitions stay"
    groups.seek("t", "g", {1: 0})
    assert groups.commit("t", "g", {1: 1}) == 1, "commits go on from the sought offset"
    assert groups.offsets_since("t", [0, 1, 2], base - 1) == {0: 3, 1: 0}, "a partition with none is left out"
    assert groups.offsets_since("t", [0], base - 5000) == {0: 0}
    assert groups.offsets_since("t", [0, 1], base + 1) == {}


def test_options_are_kept_per_scope_and_go_with_their_subscriber(repos: Repositories) -> None:
    groups = repos.groups
    topic, _ = repos.messages.ensure_topic("t", 2)
    _join(groups, topic, "a")
    groups.put_options("t", "g", "", '{"filter": "msg.key==x"}')
    groups.put_options("t", "g", "a", '{"format": "envelope"}')
    groups.put_options("t", "g", "a", '{"format": "unwrapped"}')
    assert groups.options("t", "g") == {"": '{"filter": "msg.key==x"}', "a": '{"format": "unwrapped"}'}
    assert groups.options("t", "other") == {}
    assert groups.remove("t", topic.partitions, "g", "a")
    assert groups.options("t", "g") == {"": '{"filter": "msg.key==x"}'}, "a removed subscriber's options go"
    _join(groups, topic, "b", lease_ms=-2 * HOUR_MS)
    groups.put_options("t", "g", "b", "{}")
    groups.purge(now_ms() - HOUR_MS)
    assert groups.options("t", "g") == {"": '{"filter": "msg.key==x"}'}, "a purged subscriber's options go"
    groups.put_options("t", "g", "", None)
    assert groups.options("t", "g") == {}


def test_a_read_that_fails_does_not_break_the_reads_after_it(repos: Repositories, appender: Appender) -> None:
    """On SQLite the push and fetch reads share one kept connection: one that broke is dropped."""
    topic, _ = repos.messages.ensure_topic("t", 2)
    fill(appender, topic, {0: 3, 1: 2})
    groups = repos.groups
    assert [(r.partition, r.offset) for r in groups.read("t", {0: 0, 1: 0}, 10)] == [(0, 0), (0, 1), (0, 2),
                                                                                   (1, 0), (1, 1)]
    tables = groups._tables  # type: ignore[attr-defined]
    kept = getattr(tables, "_reader", None)
    if kept is None:
        pytest.skip("this backend reads on pooled connections: nothing is kept between reads")
    kept.connection.dbapi_connection.close()  # the kept connection dies under the reader
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises for a closed connection
        groups.read("t", {0: 0, 1: 0}, 10)
    assert [(r.partition, r.offset) for r in groups.read("t", {0: 1, 1: 1}, 10)] == [(0, 1), (0, 2), (1, 1)]
