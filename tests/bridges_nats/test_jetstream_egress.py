"""JetStream as a journal route destination: exactly once through Nats-Msg-Id, across journal job crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from journal_spark.routes import HardFailure, RoutesError
from journal_spark.routes_file import load_routes
from nats_bridge.jetstream_sink import JetStreamSink
from tests.bridges_jms.conftest import activemq, amq_up, node  # noqa: F401 - activemq, node: fixtures
from tests.bridges_jms.conftest import unique as jms_unique
from tests.bridges_jms.test_faults import STALL_S, Collector, start_job
from tests.journal.jobs import PrivateSparkCluster
from tests.support import NodeProcess, wait_progressing

from .conftest import NatsThread, unique, write_routes


@pytest.fixture
def stream(nats_client: NatsThread) -> Iterator[tuple[str, str]]:
    """A JetStream stream of its own: (name, subject)."""
    name, subject = unique("EGRESS").replace(".", "_"), unique("egress")
    nats_client.call(nats_client.nc.jetstream().add_stream(name=name, subjects=[subject]))
    yield name, subject
    nats_client.call(nats_client.nc.jetstream().delete_stream(name))


def _rows(n: int, topic: str = "egress") -> list[dict[str, Any]]:
    return [{"id": f"e-{i}", "topic": topic, "partition": i % 4, "offset": i // 4, "key": None, "timestamp": 0,
             "content_type": "text/plain", "body": f"m-{i}".encode(), "headers": {"n": str(i)}} for i in range(n)]


def test_a_replayed_batch_is_stored_once_with_its_headers(nats_client: NatsThread, stream: tuple[str, str],
                                                          tmp_path: Path) -> None:
    name, subject = stream
    routes = load_routes(write_routes(tmp_path / "routes.properties", [
        f"bridge.id={unique('js-egress')}", "nats.servers=nats://127.0.0.1:4222",
        "routes.js.predicate=msg.address==egress", f"routes.js.dest.nats.subject={subject}",
        "nats-bridge.other.type=forward"]))        # the NATS bridge process's keys may share the file
    sink = JetStreamSink(routes)
    rows = _rows(50)
    assert sink.write_rows(rows, 0) == 50
    assert sink.write_rows(rows[:30], 0) == 30               # Spark replays the batch after a crash
    js = nats_client.nc.jetstream()
    info = nats_client.call(js.stream_info(name))
    assert info.state.messages == 50
    first = nats_client.call(js.get_msg(name, 1))
    assert first.data == b"m-0" and first.headers["n"] == "0" and first.headers["Nats-Msg-Id"] == "egress:e-0"
    assert first.headers["toymb.content_type"] == "text/plain" and first.headers["jmsbridge.hops"] == "1"


def test_a_subject_no_stream_holds_stops_the_job_naming_it(nats_url: str, tmp_path: Path) -> None:
    subject = unique("nostream")
    routes = load_routes(write_routes(tmp_path / "routes.properties", [
        "routes.js.predicate=msg.address==egress", f"routes.js.dest.nats.subject={subject}"]))
    with pytest.raises(HardFailure, match=subject):
        JetStreamSink(routes)


def test_the_routes_file_refuses_unknown_nats_keys(tmp_path: Path) -> None:
    with pytest.raises(RoutesError, match="nats.colour"):
        load_routes(write_routes(tmp_path / "r.properties", ["nats.colour=red"]))


# Both egress crash tests in one job: a JMS route and a JetStream route, fed from two topics of
# TOTAL messages each. The journal job starts four times (a JVM and a SparkSession each) instead of
# eight, and each kill lands while both sinks are being written: the source shares every batch
# fairly between the topics, and a kill comes as soon as the sink ahead holds its threshold (the
# other one is behind it, so neither is done before the third kill).
TOTAL = 10_000


def _post(target: NodeProcess, topic: str) -> None:
    for start in range(0, TOTAL, 1000):
        batch = [{"id": f"e-{i}", "key": f"k{i % 50}", "headers": {"n": str(i)}, "body": {"n": i}}
                 for i in range(start, start + 1000)]
        response = requests.post(f"{target.url}/v1/topics/{topic}/messages", json={"messages": batch}, timeout=60)
        assert response.status_code == 201, response.text


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_journal_job_sigkilled_three_times_during_jms_and_jetstream_egress(
        activemq: str, node: NodeProcess, nats_client: NatsThread, stream: tuple[str, str],  # noqa: F811
        tmp_path: Path) -> None:
    """SIGKILL the journal job three times while it writes JMS and JetStream, on ``local[1]`` and on a
    Spark standalone cluster in turn (same store, checkpoint and table); it finishes on the cluster."""
    cluster = PrivateSparkCluster(tmp_path / "services")
    cluster.run("start")
    try:
        _crash_run(node, nats_client, stream, tmp_path, cluster)
    finally:
        cluster.run("stop")


def _crash_run(target: NodeProcess, nats_client: NatsThread, stream: tuple[str, str], tmp_path: Path,
               cluster: PrivateSparkCluster) -> None:
    # The masters take turns: kills on local[1], the cluster, local[1]; after the third, the cluster.
    masters = ["local[1]", cluster.master, "local[1]", cluster.master]
    name, subject = stream
    _post(target, "egress")
    _post(target, "egress-js")
    queue = jms_unique("crash")
    routes = write_routes(tmp_path / "routes.properties", [
        f"bridge.id={unique('crash')}", "routing.start=earliest", "jms.egress.chunk=400",
        "routes.jms.predicate=msg.address==egress", f"routes.jms.dest.jms.queue={queue}",
        "routes.js.predicate=msg.address==egress-js", f"routes.js.dest.nats.subject={subject}"])
    collector = Collector(f"/queue/{queue}")
    collector.thread.start()
    log = tmp_path / "job.log"
    db = target.data_dir / "toymb.db"
    js = nats_client.nc.jetstream()

    def in_stream() -> int:
        return int(nats_client.call(js.stream_info(name)).state.messages)

    def each_holds(count: int) -> bool:
        return len(collector.frames) >= count and in_stream() >= count

    def either_holds(count: int) -> bool:
        return len(collector.frames) >= count or in_stream() >= count

    # Twice the rows per batch of the single-sink tests: as many of each topic as they had.
    kills = 0
    job = start_job(tmp_path, db, routes, log, max_rows=3000, master=masters[kills])
    began = time.monotonic()
    try:
        def progress() -> tuple[int, int, int]:
            # A new message in either sink, or a line in the job's log (its start), is progress.
            assert job.poll() is None, log.read_text()[-3000:]
            return len(collector.frames), in_stream(), log.stat().st_size if log.exists() else 0

        for threshold in (1500, 4000, 6500):
            # Kill in the middle of the egress, as soon as a sink holds this much.
            wait_progressing(lambda: either_holds(threshold), progress,  # noqa: B023
                             stall=STALL_S, what=f"{threshold} messages in JMS or in JetStream")
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
            if masters[kills] == cluster.master:
                # It moved the sinks past the threshold: the cluster's executors read those rows.
                assert cluster.executor_apps(), log.read_text()[-3000:]
            kills += 1
            print(f"kill {kills} at {time.monotonic() - began:.1f}s with {len(collector.frames)} in JMS, "
                  f"{in_stream()} in JetStream")
            if each_holds(TOTAL):
                break
            job = start_job(tmp_path, db, routes, log, max_rows=3000, master=masters[kills])
        if job.poll() is not None:
            job = start_job(tmp_path, db, routes, log, max_rows=3000, master=masters[kills])
        wait_progressing(lambda: each_holds(TOTAL), progress, stall=STALL_S, interval=0.5,
                         what="all messages in JMS and in JetStream")
        time.sleep(3)     # anything sent twice would arrive now
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
        collector.stop.set()
        collector.thread.join(10)
    print(f"all {TOTAL} in JMS and in JetStream after {time.monotonic() - began:.1f}s")
    assert kills == 3
    counts = Counter(f.headers["n"] for f in collector.frames)
    assert len(counts) == TOTAL and set(counts.values()) == {1}, \
        (TOTAL - len(counts), {k: v for k, v in counts.items() if v > 1})
    assert amq_up()
    assert in_stream() == TOTAL

    in_js = Counter(m.headers["n"] for m in nats_client.stream_messages(name, subject, TOTAL))
    assert len(in_js) == TOTAL and set(in_js.values()) == {1}
