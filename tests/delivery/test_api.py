"""The group API refuses bad input with a 4xx JSON error, never a 500."""

from __future__ import annotations

from typing import Any

from tests.delivery.conftest import STEADY_LEASE_MS
from tests.delivery.support import LiveNode

SUBS = "/v1/topics/api/groups/g/subscribers"


BAD_REGISTRATIONS: list[Any] = [
    {}, {"mode": "carrier-pigeon"}, {"mode": "push"}, {"mode": "push", "url": "ftp://127.0.0.1/x"},
    {"mode": "push", "url": "file:///etc/passwd"}, {"mode": "push", "url": "http://"},
    {"mode": "push", "url": "http://127.0.0.1:99999/x"}, {"mode": "push", "url": 7},
    {"mode": "pull", "url": "http://127.0.0.1:1/x"}, {"mode": "pull", "start": "middle"},
    {"mode": "pull", "id": "has spaces"}, {"mode": "pull", "id": ""}, {"mode": "pull", "id": 5},
    {"mode": "pull", "extra": 1}, [1, 2], "text", None,
]


def test_bad_registrations(live: LiveNode) -> None:
    for body in BAD_REGISTRATIONS:
        resp = live.post(SUBS, body)
        assert resp.status_code == 400, (body, resp.text)
        assert set(resp.json()) >= {"error", "message"}
    assert live.get("/v1/topics/api/groups/g").status_code == 404, "nothing was registered"


def test_bad_names_and_unknowns(live: LiveNode) -> None:
    assert live.post("/v1/topics/bad name/groups/g/subscribers", {"mode": "pull"}).status_code == 400
    assert live.post("/v1/topics/api/groups/b%20ad/subscribers", {"mode": "pull"}).status_code == 400
    assert live.post(SUBS, data=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert live.delete(SUBS + "/nobody").status_code == 404
    assert live.post("/v1/subscribers/nobody/heartbeat").status_code == 404
    assert live.get("/v1/topics/api/groups/nogroup").status_code == 404
    assert live.get("/v1/topics/nosuchtopic/groups/g").status_code == 404


def test_fetch_parameters(live: LiveNode) -> None:
    sid = live.subscribe("api", "g", mode="pull")["subscriber_id"]
    path = "/v1/topics/api/groups/g/messages"
    for params in ({"subscriber": sid, "max": "0"}, {"subscriber": sid, "max": "x"},
                   {"subscriber": sid, "max": "100000"}, {"subscriber": sid, "wait_ms": "-1"},
                   {"subscriber": sid, "wait_ms": "99999999"}, {}):
        resp = live.get(path, params=params)
        assert resp.status_code == 400, (params, resp.text)
    assert live.get(path, params={"subscriber": "ghost"}).status_code == 404
    other = live.subscribe("api", "other", mode="pull")["subscriber_id"]
    assert live.get(path, params={"subscriber": other}).status_code == 409, "not a member of this group"
    pusher = live.subscribe("api", "g", mode="push", url="http://127.0.0.1:9/push")["subscriber_id"]
    assert live.get(path, params={"subscriber": pusher}).status_code == 409, "push subscribers do not fetch"
    for body in ({"subscriber": sid}, {"subscriber": sid, "offsets": []},
                 {"subscriber": sid, "offsets": {"a": 1}}, {"subscriber": sid, "offsets": {"0": True}},
                 {"offsets": {"0": 0}}, {"x": 1}):
        assert live.post("/v1/topics/api/groups/g/offsets", body).status_code == 400, body


def test_subscriber_lifecycle(live: LiveNode) -> None:
    a = live.subscribe("life", "g", mode="pull", id="a")
    assert a["partitions"] == list(range(100))
    b = live.subscribe("life", "g", mode="pull", id="b")
    assert len(b["partitions"]) == 50
    beat = live.post("/v1/subscribers/a/heartbeat")
    assert beat.status_code == 200 and len(beat.json()["partitions"]) == 50
    clash = live.post("/v1/topics/life/groups/other/subscribers", {"mode": "pull", "id": "a"})
    assert clash.status_code == 409, "a subscriber id belongs to one group"
    assert live.delete("/v1/topics/life/groups/g/subscribers/b").status_code == 200
    assert live.group("life", "g")["assignment"] == {str(p): "a" for p in range(100)}
    assert live.delete("/v1/topics/life/groups/g/subscribers/b").status_code == 404


def test_group_limit(tmp_path: Any) -> None:
    # Leases that outlast the test: with the 2-s ones, a loaded machine took 2 s between the first
    # and the third registration, the first had expired, and the third found room.
    live = LiveNode(tmp_path, max_subscribers=2, subscriber_lease_ms=STEADY_LEASE_MS)
    try:
        live.subscribe("lim", "g", mode="pull", id="one")
        live.subscribe("lim", "g", mode="pull", id="two")
        resp = live.post("/v1/topics/lim/groups/g/subscribers", {"mode": "pull", "id": "three"})
        assert resp.status_code == 400 and resp.json()["error"] == "limit_exceeded"
        again = live.post("/v1/topics/lim/groups/g/subscribers", {"mode": "pull", "id": "two"})
        assert again.status_code == 201, "a member may re-register when the group is full"
    finally:
        live.close()
