"""Seed 001_…'s hardest promise across two ActiveMQ servers: a queue on server A reaches a queue on
server B through the broker exactly once, while the journal job is SIGKILLed twice and server B is
restarted once. Counted on B with a Java JMS consumer."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from journal_spark.jms.stompclient import StompClient
from tests.bridges_jms.conftest import PrivateActiveMQ, send_all, stored, stored_count, unique, write_routes
from tests.bridges_jms.test_ingress import make_ingress
from tests.bridges_jms.test_java_client import JARS
from tests.bridges_kafka.jobproc import JournalProcess
from tests.support import NodeProcess, free_port, need_service, wait_progressing

TOTAL = 5000
STALL_S = 240          # a job without progress this long is stuck (a JVM start on a loaded machine: ~100 s)
COUNTER = Path(__file__).with_name("JmsCount.java")


@pytest.fixture(scope="module")
def two_servers(private_activemq: PrivateActiveMQ,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivateActiveMQ, ...]]:
    """Server A is the folder's private ActiveMQ (never restarted here); server B, which the test
    restarts, is one of this module's own."""
    b = PrivateActiveMQ(tmp_path_factory.mktemp("amq-b")).start()
    yield private_activemq, b
    b.stop()


def exported(marker_queue: str, url: str) -> int:
    """How many messages the marker on server B says are exported (its next offsets, summed)."""
    client = StompClient(url).connect()
    try:
        frames = client.browse(marker_queue, timeout=20)
    finally:
        client.close()
    return max((sum(int(n) for parts in json.loads(f.body)["next"].values() for n in parts.values())
                for f in frames), default=0)


@pytest.mark.slow
@pytest.mark.xdist_group("private-activemq")
@pytest.mark.timeout(1800)   # only stops a hung run; the waits fail a stalled one after STALL_S
def test_a_to_b_exactly_once_through_two_job_kills_and_a_restart_of_b(
    two_servers: tuple[PrivateActiveMQ, PrivateActiveMQ], node: NodeProcess, tmp_path: Path
) -> None:
    need_service(all(Path(j).exists() for j in JARS), "Debian's ActiveMQ client jars (apt-get install activemq)")
    amq_a, amq_b = two_servers
    source, target, topic = unique("from-a"), unique("to-b"), "a-to-b"
    bridge_id, port = unique("ab"), free_port()
    send_all(f"/queue/{source}", [(f"m{i}".encode(), {"persistent": "true", "seq": str(i)}) for i in range(TOTAL)],
             url=amq_a.url)
    ingress = make_ingress(tmp_path, node.url, f"jms.queue={source}", topic, bridge=bridge_id,
                           port=amq_a.stomp_port, qos="ONCE_AND_ONLY_ONCE", max_batch_size="100",
                           max_batch_time="100")
    routes = write_routes(tmp_path / "a-to-b.properties", [
        f"bridge.id={bridge_id}", "routing.start=earliest", f"jms.stomp.port={amq_a.stomp_port}",
        f"jms.connection.b.port={amq_b.stomp_port}", "jms.egress.retries=-1", "jms.egress.retry.ms=500",
        "jms.egress.chunk=100", f"jms.egress.management.port={port}",
        f"routes.to-b.predicate=msg.address=={topic}", f"routes.to-b.dest.jms.queue={target}",
        "routes.to-b.jms.connection=b"])
    marker_queue = f"/queue/toymb.bridge.{bridge_id}.jms.b.markers"
    # Batches of 500 (10 for the 5,000): each job still routes several; kill 1 (1,000 sent) still
    # comes as a batch ends, B's restart (300 sent) and kill 2 (1,200) inside one. Batches of 200
    # cost the last job ~15 s (alone) of per-batch overhead.
    job = JournalProcess(tmp_path, f"sqlite:///{node.data_dir / 'toymb.db'}", routes, max_rows=500)

    def sent_by_this_job() -> int:
        try:
            return int(requests.get(f"http://127.0.0.1:{port}/bridges/jms.b", timeout=2).json()["message_count"])
        except requests.RequestException:
            return 0

    def progress() -> tuple[int, int, int]:
        assert job.proc is not None and job.proc.poll() is None, job.log_tail()
        log_size = job.log_path.stat().st_size if job.log_path.exists() else 0
        return sent_by_this_job(), stored_count(node, topic), log_size

    ingress.start()
    job.start()
    try:
        wait_progressing(lambda: sent_by_this_job() >= 1000, progress, stall=STALL_S, what="1000 sent, job 1")
        job.kill()                                                    # kill 1
        job.start()
        wait_progressing(lambda: sent_by_this_job() >= 300, progress, stall=STALL_S, what="300 sent, job 2")
        amq_b.restart(kill=True)                                      # server B killed and restarted
        wait_progressing(lambda: sent_by_this_job() >= 1200, progress, stall=STALL_S, what="1200 sent, job 2")
        job.kill()                                                    # kill 2
        job.start()
        # Each look is a STOMP connection to B and two HTTP requests: twice a second, not 20 times
        # (the kills above keep the default 50 ms, so that they land where their comments say).
        wait_progressing(lambda: exported(marker_queue, amq_b.url) >= TOTAL, progress, stall=STALL_S,
                         interval=0.5, what=f"all {TOTAL} exported to B")
    finally:
        job.kill()
        ingress.stop()
    assert len(stored(node, topic)) == TOTAL          # A -> broker: once each (JMS message ids)
    counted = subprocess.run(["java", "-cp", ":".join(JARS), str(COUNTER), f"tcp://127.0.0.1:{amq_b.openwire_port}",
                              target, str(TOTAL), "5000"], capture_output=True, text=True, timeout=300)
    lines = [line for line in counted.stdout.splitlines() if line.split(" ", 1)[0].isupper()]
    assert lines[:2] == [f"RECEIVED {TOTAL}", f"DISTINCT {TOTAL}"], counted.stdout[-2000:] + counted.stderr[-2000:]
