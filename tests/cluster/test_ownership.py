"""Properties of Levenshtein rendezvous ownership (DESIGN.md, Semantics: Ownership)."""

from __future__ import annotations

import random
import string
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cluster.ownership import Member, owner, ownership_key, ranking
from broker.node import node_id

NAME_CHARS = string.ascii_letters + string.digits + "._-"
topic_names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=200)
node_names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=40)
clusters = st.lists(node_names, min_size=1, max_size=7, unique=True)


def members(names: list[str]) -> list[Member]:
    return [Member(n, node_id(n)) for n in names]


TOYMB3 = members(["toymb-1", "toymb-2", "toymb-3"])


@given(topic_names, clusters, st.randoms(use_true_random=False))
def test_deterministic_whatever_the_live_set_order(topic: str, names: list[str], rnd: random.Random) -> None:
    live = members(names)
    shuffled = list(live)
    rnd.shuffle(shuffled)
    chosen = owner(topic, live)
    assert chosen is not None and chosen in live
    assert owner(topic, shuffled) == chosen
    assert owner(topic, members(list(names))) == chosen  # fresh objects: value semantics only


@given(st.lists(topic_names, min_size=1, max_size=50), clusters, st.data())
def test_removing_a_node_moves_only_its_topics(topics: list[str], names: list[str],
                                               data: st.DataObject) -> None:
    live = members(names)
    gone = data.draw(st.sampled_from(live))
    rest = [m for m in live if m != gone]
    for topic in topics:
        before = owner(topic, live)
        after = owner(topic, rest)
        if before != gone:
            assert after == before, f"{topic!r} moved from {before} although only {gone} left"
        elif rest:
            # Failover walks the ranking: the next owner is the runner-up of the full set.
            assert after == ranking(topic, live)[1]


@given(st.lists(topic_names, min_size=1, max_size=50), clusters, node_names)
def test_adding_a_node_moves_topics_only_to_it(topics: list[str], names: list[str], new: str) -> None:
    live = members(names)
    grown = live + [m for m in members([new]) if m not in live]
    for topic in topics:
        after = owner(topic, grown)
        assert after == owner(topic, live) or after.name == new  # type: ignore[union-attr]


@given(clusters, st.data())
def test_a_topic_named_after_a_node_is_owned_by_it(names: list[str], data: st.DataObject) -> None:
    live = members(names)
    target = data.draw(st.sampled_from(live))
    assert owner(target.name, live) == target


def test_affinity_for_the_default_node_names() -> None:
    for member in TOYMB3:
        assert owner(member.name, TOYMB3) == member
        # ...and it survives the loss of any other node.
        assert owner(member.name, [member]) == member
        for other in TOYMB3:
            if other != member:
                assert owner(member.name, [m for m in TOYMB3 if m != other]) == member


def _balance(topics: list[str], live: list[Member]) -> float:
    counts = Counter(owner(t, live) for t in topics)
    assert set(counts) == set(live), "every node should own something"
    return max(counts.values()) / (len(topics) / len(live))


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_balanced_over_10000_random_names_for_three_nodes(seed: int) -> None:
    rnd = random.Random(seed)
    topics = ["".join(rnd.choice(NAME_CHARS) for _ in range(rnd.randint(1, 40))) for _ in range(10_000)]
    assert _balance(topics, TOYMB3) <= 1.15


def test_balanced_for_names_people_actually_use() -> None:
    shapes = [
        [f"topic-{i}" for i in range(10_000)],
        [f"orders.{i % 97}.v{i % 7}-{i}" for i in range(10_000)],
        [f"toymb-{i}" for i in range(10_000)],  # close to every node name at once
    ]
    for topics in shapes:
        assert _balance(topics, TOYMB3) <= 1.15, topics[:3]


def test_balanced_when_nodes_are_named_unalike() -> None:
    # A raw Levenshtein-first score sends ~43% of random names to the longest node name here.
    rnd = random.Random(7)
    topics = ["".join(rnd.choice(NAME_CHARS) for _ in range(rnd.randint(1, 40))) for _ in range(10_000)]
    assert _balance(topics, members(["a", "broker-east", "c2"])) <= 1.15


def test_dead_letter_topics_live_with_their_source() -> None:
    assert ownership_key("orders.dlq", ".dlq") == "orders"
    assert ownership_key(".dlq", ".dlq") == ".dlq"
    assert ownership_key("orders", ".dlq") == "orders"
    for i in range(200):
        topic = f"t{i}"
        assert owner(ownership_key(topic + ".dlq", ".dlq"), TOYMB3) == owner(topic, TOYMB3)
