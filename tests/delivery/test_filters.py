"""Subscription filters: each filtered group receives exactly its matching messages, in order."""

from __future__ import annotations

import random
from typing import Any

from journal_spark.predicates import parse_predicate
from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until

FILTERS = {
    "eu": "msg.header.region^=eu-",
    "red-big": "msg.header.color==red && msg.header.size!=small",
    "k7-or-blue": "msg.key==k7 || msg.header.color==blue",
    "not-green": "(msg.header.color!=green)",
}


def _messages(n: int) -> list[dict[str, Any]]:
    rng = random.Random(21)
    out = []
    for i in range(n):
        headers = {"color": rng.choice(["red", "green", "blue"]), "size": rng.choice(["small", "big"]),
                   "region": rng.choice(["eu-west", "eu-north", "us-east", "ap"])}
        if i % 11 == 0:
            del headers["color"]  # a missing header: == is false, != is true
        out.append({"id": f"m{i}", "key": f"k{i % 13}", "headers": headers, "body": i})
    return out


def _first_seen(envelopes: list[dict[str, Any]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for env in envelopes:
        seen = out.setdefault(env["partition"], [])
        if env["offset"] not in seen:
            seen.append(env["offset"])
    return out


def test_ten_thousand_mixed_messages_reach_exactly_the_matching_groups_in_order(steady: LiveNode) -> None:
    receivers = {name: Receiver() for name in FILTERS}
    try:
        for name, text in FILTERS.items():
            steady.subscribe("mixed", name, mode="push", url=receivers[name].url, filter=text)
        pull = steady.subscribe("mixed", "pull-eu", mode="pull", filter=FILTERS["eu"])
        sent = _messages(10_000)
        stored = steady.publish("mixed", sent)
        where = {s["id"]: (s["partition"], s["offset"]) for s in stored}
        for name, text in FILTERS.items():
            match = parse_predicate(text)
            want = [m["id"] for m in sent if match({"topic": "mixed", "id": m["id"], "key": m["key"],
                                                    "headers": m["headers"]})]
            assert 0 < len(want) < len(sent)
            count = len(want)
            wait_until(lambda r=receivers[name], n=count: len(r.messages()) >= n, timeout=120,
                       what=f"group {name} received its matches")
            got = receivers[name].messages()
            assert sorted(e["id"] for e in got) == sorted(want), f"{name}: exactly the matches, once"
            expected: dict[int, list[int]] = {}
            for msg_id in want:
                p, o = where[msg_id]
                expected.setdefault(p, []).append(o)
            assert _first_seen(got) == {p: sorted(o) for p, o in expected.items()}, f"{name}: in order"
            wait_until(lambda g=name: steady.group("mixed", g)["total_lag"] == 0, timeout=30,
                       what=f"{name}: unmatched messages count as acknowledged")
        pulled: list[dict[str, Any]] = []
        eu = [m["id"] for m in sent if m["headers"]["region"].startswith("eu-")]

        def drain() -> bool:
            url = "/v1/topics/mixed/groups/pull-eu"
            batch = steady.get(f"{url}/messages", params={"subscriber": pull["subscriber_id"], "max": 1000}
                               ).json()["messages"]
            pulled.extend(batch)
            last: dict[str, int] = {}
            for m in batch:
                last[str(m["partition"])] = max(last.get(str(m["partition"]), -1), m["offset"])
            if last:
                steady.post(f"{url}/offsets", {"subscriber": pull["subscriber_id"], "offsets": last})
            return len(pulled) >= len(eu)
        wait_until(drain, timeout=120, what="the pull group fetched its matches")
        assert sorted(m["id"] for m in pulled) == sorted(eu)


        def settled() -> bool:
            drain()  # a fetch commits the unmatched messages at the head of each partition
            return int(steady.group("mixed", "pull-eu")["total_lag"]) == 0
        wait_until(settled, timeout=30, what="the pull group's lag reaches 0")
        assert sorted(m["id"] for m in pulled) == sorted(eu), "and nothing more came"
    finally:
        for receiver in receivers.values():
            receiver.stop()


def test_bad_filters_are_refused_and_a_filter_is_fixed_once_set(steady: LiveNode) -> None:
    for bad in ("", "msg.body==x", "msg.key=x", "msg.key==", "(" * 40 + "msg.key==a" + ")" * 40, 7,
                "x" * 5000, "msg.key==a &&", "msg.key==\x00"):
        resp = steady.post("/v1/topics/f/groups/g/subscribers", {"mode": "pull", "filter": bad})
        assert resp.status_code == 400 and resp.json()["error"] == "bad_filter", (bad, resp.text)
    steady.subscribe("f", "g", mode="pull", filter="msg.key==a")
    assert steady.group("f", "g")["filter"] == "msg.key==a", "the group's state shows its filter"
    steady.subscribe("f", "g", mode="pull", filter="msg.key==a")
    steady.subscribe("f", "g", mode="pull")
    other = steady.post("/v1/topics/f/groups/g/subscribers", {"mode": "pull", "filter": "msg.key==b"})
    assert other.status_code == 409
