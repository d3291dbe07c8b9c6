"""Long polls forwarded by a node that does not own the topic are capped there too (issue 13, item 6).

Each owner lets half its threads wait, but the node that forwards waits as long as the owners do:
with two other owners, 40 long polls sent to one node for their topics held every thread of that
node for the whole wait, and its ``/health`` and publishes timed out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.cluster.harness import Cluster, owner_name, private_database, publish

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

POLLS = 40
WAIT_MS = 20_000
THREADS = 16  # the harness's TOYMB_THREADS: at most THREADS // 2 polls wait on a node


@pytest.fixture(params=["postgresql", "mariadb"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    server: str = request.getfixturevalue("mariadb_url" if request.param == "mariadb" else "pg_url")
    nodes = Cluster(tmp_path, private_database(server), {"TOYMB_THREADS": str(THREADS)})
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def test_forwarded_long_polls_past_the_cap_are_answered_at_once_and_the_node_stays_responsive(
        cluster: Cluster) -> None:
    here, own_topic = "toymb-1", "toymb-1"
    elsewhere = ["toymb-2", "toymb-3"]  # owned by the other two nodes (a topic named after a node)
    assert owner_name(own_topic) == here and [owner_name(t) for t in elsewhere] == elsewhere
    url = cluster.url(here)
    sids = {}
    for topic in elsewhere:
        r = requests.post(f"{url}/v1/topics/{topic}/groups/g/subscribers", json={"mode": "pull"}, timeout=10)
        assert r.status_code == 201, r.text
        sids[topic] = r.json()["subscriber_id"]

    answers: list[tuple[int, float, int]] = []  # (status, seconds, messages)
    lock = threading.Lock()

    def poll(topic: str) -> None:
        started = time.monotonic()
        try:
            a = requests.get(f"{url}/v1/topics/{topic}/groups/g/messages",
                             params={"subscriber": sids[topic], "wait_ms": WAIT_MS}, timeout=60)
            outcome = (a.status_code, time.monotonic() - started, len(a.json().get("messages", [])))
        except requests.RequestException:
            outcome = (0, time.monotonic() - started, 0)
        with lock:
            answers.append(outcome)

    polls = [threading.Thread(target=poll, args=(elsewhere[n % 2],), daemon=True) for n in range(POLLS)]
    for t in polls:
        t.start()
    time.sleep(2)  # every poll has reached the node (most are answered by now)

    # While the polls that may wait are waiting, the node answers everything else.
    health = requests.get(f"{url}/health", timeout=5)
    assert health.status_code == 200, health.text
    stored = publish(url, own_topic, "during-polls", timeout=5)
    assert stored.status_code == 201, stored.text
    for topic in elsewhere:
        forwarded = publish(url, topic + "-x", f"forwarded-during-polls-{topic}", timeout=5)
        assert forwarded.status_code == 201, forwarded.text

    for t in polls:
        t.join(timeout=WAIT_MS / 1000 + 30)
    assert len(answers) == POLLS
    assert all(status == 200 for status, _, _ in answers), answers
    at_once = [a for a in answers if a[1] < WAIT_MS / 1000 / 2]
    waited = [a for a in answers if a[1] >= WAIT_MS / 1000 / 2]
    # Past the cap the poll is forwarded with wait_ms=0: an empty answer at once, as a fetch that
    # found nothing. At most THREADS // 2 waited the whole time.
    assert len(waited) <= THREADS // 2, answers
    assert len(at_once) >= POLLS - THREADS // 2, answers
