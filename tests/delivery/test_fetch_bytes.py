"""A fetch returns at most ``fetch_max_bytes`` of messages, at least one (issue 13, item 10).

Without the cap, one fetch of 300 messages of 1 MiB loaded and rendered all of them at once and
drove the node to 1.9 GiB. Messages past the cap are neither returned nor in flight: the next
fetch returns them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from bench.common import peak_rss_mb
from broker.app import create_app
from tests.support import NodeProcess

MIB = 1 << 20


SUBSCRIBE = {"mode": "pull", "start": "earliest"}


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"data_dir": str(tmp_path), "fetch_max_bytes": 300})
    yield app
    app.extensions["toymb"].stop()


def test_a_fetch_stops_at_the_byte_cap_but_always_returns_one_message(capped: Flask) -> None:
    client: FlaskClient = capped.test_client()
    assert client.put("/v1/topics/t", json={"partitions": 1}).status_code in (200, 201)
    sizes = [100, 100, 100, 1000, 100]  # the fourth alone is over the cap
    for n, size in enumerate(sizes):
        r = client.post("/v1/topics/t/messages", json={"id": f"m{n}", "body": "x" * size,
                                                        "content_type": "text/plain"})
        assert r.status_code == 201, r.get_data(as_text=True)
    r = client.post("/v1/topics/t/groups/g/subscribers", json=SUBSCRIBE)
    assert r.status_code == 201
    sid = r.get_json()["subscriber_id"]
    got = []
    for _ in range(len(sizes) + 1):
        # No commit between fetches: what the cap left out is not in flight, so it comes next.
        r = client.get(f"/v1/topics/t/groups/g/messages?subscriber={sid}&max=100")
        assert r.status_code == 200
        got.append([m["id"] for m in r.get_json()["messages"]])
    # 100 bytes of body plus id, headers and content type each: two fit under 300, the big one
    # goes alone, and nothing is skipped or repeated.
    assert got[:4] == [["m0", "m1"], ["m2"], ["m3"], ["m4"]]
    assert got[4:] == [[], []]


def test_fetching_300_messages_of_1_mib_stays_within_the_cap_and_the_node_stays_small(tmp_path: Path) -> None:
    count, partitions = 300, 4
    body = "x" * (MIB - 2)  # stored as the JSON string: exactly max_body (1 MiB)
    with NodeProcess(tmp_path) as node:
        with requests.Session() as http:
            r = http.put(f"{node.url}/v1/topics/big", json={"partitions": partitions}, timeout=10)
            assert r.status_code in (200, 201), r.text
            r = http.post(f"{node.url}/v1/topics/big/groups/g/subscribers", json=SUBSCRIBE, timeout=10)
            assert r.status_code == 201, r.text
            sid = r.json()["subscriber_id"]
            published: dict[int, list[str]] = {}
            for n in range(count):
                r = http.post(f"{node.url}/v1/topics/big/messages",
                              json={"id": f"m{n}", "key": f"k{n % 7}", "body": body}, timeout=60)
                assert r.status_code == 201, r.text[:300]
                published.setdefault(r.json()["partition"], []).append(f"m{n}")

            fetched: dict[int, list[str]] = {}
            largest = 0
            for _ in range(2 * count):
                r = http.get(f"{node.url}/v1/topics/big/groups/g/messages",
                             params={"subscriber": sid, "max": count}, timeout=60)
                assert r.status_code == 200, r.text[:300]
                messages = r.json()["messages"]
                if not messages:
                    break
                largest = max(largest, len(r.content))
                # Under the cap plus one message (the one that may go past it), plus JSON framing.
                assert sum(len(m["body"]) for m in messages) <= 4 * MIB + MIB
                assert len(r.content) <= 4 * MIB + MIB + 64 * 1024
                last: dict[str, int] = {}
                for m in messages:
                    fetched.setdefault(m["partition"], []).append(m["id"])
                    last[str(m["partition"])] = m["offset"]
                c = http.post(f"{node.url}/v1/topics/big/groups/g/offsets",
                              json={"subscriber": sid, "offsets": last}, timeout=60)
                assert c.status_code == 200, c.text[:300]
        assert node.proc is not None
        peak_mib = peak_rss_mb(node.proc.pid)
    # Every message once, in publish order within its partition.
    assert fetched == published
    print(f"\nnode peak RSS (VmHWM) {peak_mib:.0f} MiB; largest fetch answer {largest / MIB:.2f} MiB")
    assert peak_mib < 300, f"node peak RSS {peak_mib:.0f} MiB"
