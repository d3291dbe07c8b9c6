"""Properties of the sticky, balanced assignment (a pure function)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.delivery.assignment import assign, partitions_by_member

members_st = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=12, unique=True)


def check_balanced(result: dict[int, str], count: int, members: list[str]) -> None:
    assert sorted(result) == list(range(count)), "every partition has exactly one holder"
    assert set(result.values()) <= set(members)
    loads = [len(v) for v in partitions_by_member(result).values()]
    if count >= len(members):
        assert len(loads) == len(members), "everyone gets something when there is enough"
    assert max(loads) - min(loads) <= 1


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 300), members=members_st, data=st.data())
def test_balanced_complete_and_deterministic(count: int, members: list[str], data: st.DataObject) -> None:
    current = data.draw(st.dictionaries(st.integers(0, count - 1), st.sampled_from(members + ["gone"])))
    result = assign(count, members, current)
    check_balanced(result, count, members)
    assert assign(count, list(reversed(members)), dict(current)) == result


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 300), members=members_st, newcomer=st.text("xyz", min_size=1, max_size=3))
def test_a_join_moves_only_what_the_newcomer_takes(count: int, members: list[str], newcomer: str) -> None:
    before = assign(count, members, {})
    after = assign(count, members + [newcomer], before)
    check_balanced(after, count, members + [newcomer])
    moved = [p for p in range(count) if before[p] != after[p]]
    assert all(after[p] == newcomer for p in moved), "old members only lose partitions, to the newcomer"
    assert len(moved) == sum(1 for p in after if after[p] == newcomer)


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 300), members=st.lists(st.text("abc", min_size=1, max_size=3), min_size=2,
                                                       max_size=10, unique=True), data=st.data())
def test_a_leave_moves_only_the_leavers_partitions(count: int, members: list[str],
                                                   data: st.DataObject) -> None:
    before = assign(count, members, {})
    leaver = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != leaver]
    after = assign(count, rest, before)
    check_balanced(after, count, rest)
    moved = [p for p in range(count) if before[p] != leaver and after[p] != before[p]]
    assert moved == [], "survivors keep every partition they had"


def test_four_members_split_one_hundred() -> None:
    result = assign(100, ["d", "a", "c", "b"], {})
    loads = {m: len(ps) for m, ps in partitions_by_member(result).items()}
    assert loads == {"a": 25, "b": 25, "c": 25, "d": 25}


def test_no_members_no_assignment() -> None:
    assert assign(100, [], {1: "a"}) == {}


def test_a_revoked_subscriber_is_remembered_for_an_hour_like_an_expired_one(tmp_path: Path) -> None:
    """Purging keeps subscribers whose lease ended (or was revoked) within the last hour."""
    from broker.delivery.assignment import assign
    from broker.store.groups import GroupStore, now_ms
    from broker.store.sql import Store

    store = Store(f"sqlite:///{tmp_path / 'toymb.db'}")
    store.create_schema()
    groups = GroupStore(store, assign)
    for sid in ("revoked", "expired"):
        groups.register("t", 4, "g", sid, mode="pull", url=None, compat=False, lease_until_ms=now_ms() - 10,
                        start="latest", max_members=10)
    revoked = groups.revoke("revoked")
    assert revoked is not None and revoked.revoked and not revoked.live()
    assert groups.purge(now_ms() - 3_600_000) == 0, "a purge round right after a revocation forgets nothing"
    assert {s.id for s in groups.members("t", "g")} == {"revoked", "expired"}
    assert groups.get("revoked") is not None and groups.get("revoked").revoked  # type: ignore[union-attr]
    assert groups.purge(now_ms() + 1) == 2
    store.dispose()
