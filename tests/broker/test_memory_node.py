"""A node whose ``database_url`` is ``memory://<name>`` runs for real: every repository in its memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from broker.app import create_app


@pytest.fixture
def memory_app(tmp_path: Path) -> Iterator[Flask]:
    application = create_app({"data_dir": str(tmp_path), "database_url": f"memory://{tmp_path}"})
    yield application
    application.extensions["toymb"].stop()


def test_publish_fetch_commit_and_the_lag_goes_to_zero(memory_app: Flask) -> None:
    node = memory_app.extensions["toymb"]
    assert node.store.dialect == "memory" and not (Path(node.settings.data_dir) / "toymb.db").exists()
    client = memory_app.test_client()
    assert client.put("/v1/topics/orders", json={"partitions": 3}).status_code in (200, 201)
    sent = client.post("/v1/topics/orders/messages",
                       json={"messages": [{"id": f"m{i}", "key": f"k{i}", "body": {"i": i}} for i in range(10)]})
    assert sent.status_code == 201, sent.text

    joined = client.post("/v1/topics/orders/groups/billing/subscribers", json={"mode": "pull", "start": "earliest"})
    assert joined.status_code == 201, joined.text
    sid = joined.get_json()["subscriber_id"]
    assert joined.get_json()["partitions"] == [0, 1, 2]
    assert client.get("/v1/topics/orders/groups/billing").get_json()["total_lag"] == 10

    fetched = client.get("/v1/topics/orders/groups/billing/messages", query_string={"subscriber": sid, "max": 100})
    assert fetched.status_code == 200, fetched.text
    messages = fetched.get_json()["messages"]
    assert sorted(m["id"] for m in messages) == sorted(f"m{i}" for i in range(10))
    last: dict[str, int] = {}
    for m in messages:
        last[str(m["partition"])] = max(last.get(str(m["partition"]), -1), m["offset"])
    committed = client.post("/v1/topics/orders/groups/billing/offsets", json={"subscriber": sid, "offsets": last})
    assert committed.status_code == 200, committed.text
    assert committed.get_json()["acknowledged"] == 10

    group = client.get("/v1/topics/orders/groups/billing").get_json()
    assert group["total_lag"] == 0 and [s["id"] for s in group["subscribers"]] == [sid]
    assert client.get("/v1/topics/orders/groups/billing/messages",
                      query_string={"subscriber": sid}).get_json()["messages"] == []
