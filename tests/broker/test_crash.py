"""A node killed with SIGKILL in the middle of a stream of publishes loses no acknowledged message."""

from __future__ import annotations

import threading
from pathlib import Path

import requests

from broker.envelope import render_row
from broker.store import Store
from tests.support import NodeProcess, wait_until


def test_sigkill_mid_stream_keeps_every_ack_and_dense_offsets(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "node").start()
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def publisher(worker: int) -> None:
        session = requests.Session()
        i = 0
        while not stop.is_set() and i < 5000:
            msg_id = f"w{worker}-{i}"
            try:
                r = session.post(f"{node.url}/v1/topics/stream/messages",
                                 json={"id": msg_id, "key": f"k{i % 7}", "body": {"i": i}}, timeout=5)
            except requests.RequestException:
                return  # the node died under us: this one was never acknowledged
            if r.status_code in (200, 201):
                with lock:
                    acked[msg_id] = (r.json()["partition"], r.json()["offset"])
            i += 1

    threads = [threading.Thread(target=publisher, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 1500, timeout=120, what="1500 acknowledged publishes")
    node.kill()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    snapshot = dict(acked)

    node.start()  # same data dir: the same node restarted
    r = requests.post(f"{node.url}/v1/topics/stream/messages", json={"id": "after", "key": "k0", "body": 1},
                      timeout=10)
    assert r.status_code == 201
    node.stop()

    store = Store(f"sqlite:///{node.data_dir / 'toymb.db'}")
    try:
        ends = store.end_offsets("stream")
        rows = [row for p, end in ends.items() for row in map(render_row, store.read_range("stream", p, 0, end + 10))]
    finally:
        store.dispose()
    by_id = {row["id"]: (row["partition"], row["offset"]) for row in rows}
    lost = [i for i in snapshot if i not in by_id]
    assert not lost, f"{len(lost)} acknowledged messages lost"
    moved = [i for i, coords in snapshot.items() if by_id[i] != coords]
    assert not moved, f"{len(moved)} messages changed coordinates"
    assert len(by_id) == len(rows), "an id was stored twice"
    for partition, end in ends.items():
        offsets = sorted(row["offset"] for row in rows if row["partition"] == partition)
        assert offsets == list(range(end)), f"partition {partition} skipped or doubled an offset"
    assert by_id["after"][1] == ends[by_id["after"][0]] - 1
