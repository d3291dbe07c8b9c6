"""How the console and ``toymb status`` show durations and a node that left cleanly."""

from __future__ import annotations

import time

from flask import Flask

from broker.console.overview import cluster_section
from broker.console.status import readable_ms, render


def test_durations_read_as_people_read_them() -> None:
    assert [readable_ms(ms) for ms in (0, 850, 4_240, 547_800, 11_100_000, 200_000_000)] == [
        "0 ms", "850 ms", "4.2 s", "9 min 7 s", "3 h 5 min", "2 d 7 h"]
    assert readable_ms(None) == "left (stopped cleanly)"


def test_a_node_that_stopped_cleanly_is_shown_as_left_not_as_decades_old(app: Flask) -> None:
    node = app.extensions["toymb"]
    store = node.membership.cluster_store
    store.beat("gone-node-id", "toymb-gone", "http://127.0.0.1:1", int(time.time() * 1000), register=True)
    store.mark_gone("gone-node-id")          # what a node does when it stops cleanly
    node.membership.tick()
    nodes = {n["name"]: n for n in cluster_section(node)["nodes"]}
    assert nodes["toymb-gone"]["left"] is True and nodes["toymb-gone"]["lease_age_ms"] is None
    me = nodes[node.name]
    assert me["left"] is False and 0 <= me["lease_age_ms"] < 60_000
    overview = {"cluster": cluster_section(node), "checked_ms": int(time.time() * 1000), "topics": [],
                "groups": [], "journal": {"journaled": 0, "lag": 0},
                "bridges": []}
    text = render(overview)
    gone = next(line for line in text.splitlines() if line.startswith("toymb-gone"))
    assert "left (stopped cleanly)" in gone and "ms" not in gone
