"""The Kafka egress sink against real Kafka: routing, headers, keys, error policies, hard stops."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from journal_spark.bridges.kafka import KafkaSink
from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.routes import DataError, HardFailure
from journal_spark.routes_file import load_routes
from tests.bridges_kafka.conftest import consume_all, create_topics, routes_file

pytestmark = pytest.mark.usefixtures("kafka")


def message(topic: str, offset: int, headers: dict[str, str] | None = None, key: str | None = None,
            body: bytes = b"", partition: int = 0) -> dict[str, Any]:
    return {"id": f"{topic}-{partition}-{offset}", "topic": topic, "partition": partition, "offset": offset,
            "key": key, "headers": headers or {}, "timestamp": int(time.time() * 1000),
            "content_type": "text/plain", "body": body or f"body {offset}".encode()}


def headers_of(record: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in (record.headers() or [])}


def test_first_match_routing_headers_and_keys(tmp_path: Path, names: Any) -> None:
    orders, audit, rest = names("orders"), names("audit"), names("rest")
    create_topics(orders, audit, rest)
    bridge = f"edge-{orders}"     # markers are per bridge id: a fresh id per run
    path = routes_file(tmp_path, f"""bridge.id={bridge}
routes.vip.predicate=msg.address==shop && msg.header.tier==gold || msg.header.kind=="audit me"
routes.vip.dest.topic={audit}
routes.orders.predicate=msg.address==shop
routes.orders.dest.topic={orders}
routes.orders.conv.key=msg.header.CorrelationId
routes.other.predicate=msg.address!=shop
routes.other.dest.topic={rest}
""")
    telemetry = BridgeTelemetry(bridge)
    sink = KafkaSink(load_routes(path), telemetry)
    rows = [
        message("shop", 0, {"tier": "gold", "CorrelationId": "c0", "jms.JMSType": "order"}),   # vip
        message("shop", 1, {"tier": "silver", "CorrelationId": "c1", "jms.JMSPriority": "4"}),  # orders
        message("misc", 0, {"kind": "audit me"}),                                               # vip
        message("misc", 1),                                                                     # other
        message("shop", 2, {"CorrelationId": "c2", "jmsbridge.origin": bridge}),    # ours: not re-exported
        message("shop", 3, {"CorrelationId": "c3", "jmsbridge.hops": "4"}),           # too many hops
    ]
    assert sink.write_rows(rows, 0) == 4
    vip = consume_all(audit, expect=2)
    assert sorted(r.key().decode() for r in vip) == ["misc-0-0", "shop-0-0"]   # no conv.key: message id
    order = consume_all(orders, expect=1)
    assert [r.key().decode() for r in order] == ["c1"]                         # key from the header
    headers = headers_of(order[0])
    assert headers["jms.JMSPriority"] == "4" and headers["CorrelationId"] == "c1"
    assert headers["jmsbridge.origin"] == bridge and headers["jmsbridge.hops"] == "1"
    assert headers["toymb.content_type"] == "text/plain"
    assert order[0].value() == b"body 1"
    assert headers_of([r for r in vip if r.key() == b"shop-0-0"][0])["jms.JMSType"] == "order"
    assert [r.key().decode() for r in consume_all(rest, expect=1)] == ["misc-0-1"]
    assert telemetry.counts(sink.name) == (4, 0)
    text = _exposition(telemetry)
    assert f'jms_bridge_routing_success_total{{jms_bridge_id="{bridge}",sink="kafka.bridge"}} 4.0' in text
    assert "jms_bridge_routing_latency_avg{" in text
    for reason in ("cycle", "max-hops"):
        assert (f'jms_bridge_routing_skipped_total{{jms_bridge_id="{bridge}",reason="{reason}",'
                f'sink="kafka.bridge"}} 1.0') in text


def _exposition(telemetry: BridgeTelemetry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(telemetry.registry).decode()


ERROR_ROUTES = """bridge.id={dest}
routing.on-error={policy}
routing.dead-letter.topic={dlq}
routes.r.predicate=msg.address==shop
routes.r.dest.topic={dest}
routes.r.conv.key=msg.header.CorrelationId
"""


def _bad_rows() -> list[dict[str, Any]]:
    return [message("shop", 0, {"CorrelationId": "a"}),
            message("shop", 1, {}),                                        # no key header
            message("shop", 2, {"CorrelationId": "c", "jmsbridge.hops": "x"}),   # unconvertible hop count
            message("shop", 3, {"CorrelationId": "d"}),
            message("shop", 4, {"jms.CorrelationId": "no spaces!"})]              # not alphanumeric


def test_on_error_fail_stops_and_writes_nothing(tmp_path: Path, names: Any) -> None:
    dest, dlq = names("dest"), names("dlq")
    create_topics(dest)
    path = routes_file(tmp_path, ERROR_ROUTES.format(policy="fail", dlq=dlq, dest=dest))
    sink = KafkaSink(load_routes(path))
    with pytest.raises(DataError, match=r"shop-0-1.*CorrelationId.*routing.on-error=fail"):
        sink.write_rows(_bad_rows(), 0)
    assert consume_all(dest, idle_s=2) == []          # the batch's transaction was aborted
    assert len(consume_all(dest, read_committed=False, idle_s=2)) <= 1   # (aborted data, never visible)
    again = KafkaSink(load_routes(path))
    with pytest.raises(DataError, match=r"shop-0-4.*'no spaces!' is not an alphanumeric key.*on-error=fail"):
        again.write_rows([_bad_rows()[4]], 1)


def test_on_error_skip_logs_and_goes_on(tmp_path: Path, names: Any, caplog: pytest.LogCaptureFixture) -> None:
    dest, dlq = names("dest"), names("dlq")
    create_topics(dest)
    telemetry = BridgeTelemetry(dest)
    path = routes_file(tmp_path, ERROR_ROUTES.format(policy="skip", dlq=dlq, dest=dest))
    sink = KafkaSink(load_routes(path), telemetry)
    assert sink.write_rows(_bad_rows(), 0) == 2
    assert sorted(r.key() for r in consume_all(dest, expect=2)) == [b"a", b"d"]
    assert "skipped message shop-0-1" in caplog.text and "skipped message shop-0-2" in caplog.text
    assert "skipped message shop-0-4" in caplog.text and "'no spaces!' is not an alphanumeric key" in caplog.text
    assert telemetry.counts(sink.name) == (2, 3)
    exposition = _exposition(telemetry)
    assert 'reason="no-key"' in exposition and 'reason="bad-hops"' in exposition and 'reason="bad-key"' in exposition


def test_on_error_dead_letter_publishes_reasons(tmp_path: Path, names: Any) -> None:
    dest, dlq = names("dest"), names("dlq")
    create_topics(dest, dlq)
    path = routes_file(tmp_path, ERROR_ROUTES.format(policy="dead-letter", dlq=dlq, dest=dest))
    sink = KafkaSink(load_routes(path))
    assert sink.write_rows(_bad_rows(), 0) == 2
    assert sorted(r.key() for r in consume_all(dest, expect=2)) == [b"a", b"d"]
    letters = {r.key().decode(): (headers_of(r), r.value()) for r in consume_all(dlq, expect=3)}
    assert set(letters) == {"shop-0-1", "shop-0-2", "shop-0-4"}
    headers, body = letters["shop-0-1"]
    assert headers["toymb.dlq.reason"] == "no-key" and headers["toymb.dlq.route"] == "r"
    assert headers["toymb.dlq.source"] == "shop/0/1" and "CorrelationId" in headers["toymb.dlq.error"]
    assert body == b"body 1"
    assert letters["shop-0-2"][0]["toymb.dlq.reason"] == "bad-hops"
    assert letters["shop-0-4"][0]["toymb.dlq.reason"] == "bad-key"
    assert "not an alphanumeric key" in letters["shop-0-4"][0]["toymb.dlq.error"]


def test_missing_topics_are_a_hard_stop(tmp_path: Path, names: Any) -> None:
    dest, dlq = names("dest"), names("never-made")
    create_topics(dest)
    missing_dest = routes_file(tmp_path, f"routes.r.predicate=msg.address==a\nroutes.r.dest.topic={dlq}\n")
    with pytest.raises(HardFailure, match=f"{dlq} do not exist"):
        KafkaSink(load_routes(missing_dest))
    # a dead-letter topic that is missing is found at startup too, not when the first letter fails
    missing_dlq = routes_file(tmp_path, ERROR_ROUTES.format(policy="dead-letter", dlq=dlq, dest=dest))
    with pytest.raises(HardFailure, match=dlq):
        KafkaSink(load_routes(missing_dlq))


def test_replayed_batches_are_not_exported_twice(tmp_path: Path, names: Any) -> None:
    """A batch id replayed by Spark, or rows re-read after a lost checkpoint, export nothing again,
    even from a new process-like sink (new producer, markers read back from Kafka)."""
    dest = names("dest")
    create_topics(dest, partitions=3)
    path = routes_file(tmp_path, f"bridge.id={dest}\nroutes.r.predicate=msg.address==shop\n"
                                 f"routes.r.dest.topic={dest}\n")
    rows = [message("shop", o, partition=p) for p in range(3) for o in range(50)]
    first = KafkaSink(load_routes(path))
    assert first.write_rows(rows[:90], 0) == 90
    second = KafkaSink(load_routes(path))          # fences `first`, reads its markers
    assert second.write_rows(rows[:90], 0) == 0    # the same batch again
    assert second.write_rows(rows, 1) == 60        # an overlapping batch: only the new rows
    keys = Counter(r.key().decode() for r in consume_all(dest, expect=150))
    assert len(keys) == 150 and set(keys.values()) == {1}


def test_routing_telemetry_is_on_the_journals_metrics(tmp_path: Path, names: Any) -> None:
    """build_sinks (as the journal job calls it) registers the seed's metrics in the journal's registry."""
    import requests

    from broker.config import load
    from journal_spark import bridges
    from journal_spark.metrics import JournalMetrics
    from tests.support import free_port

    dest = names("metrics")
    create_topics(dest)
    path = routes_file(tmp_path, f"bridge.id={dest}\nrouting.on-error=skip\n"
                                 f"routes.r.predicate=msg.address==shop\nroutes.r.dest.topic={dest}\n"
                                 "routes.r.conv.key=msg.header.k\n")
    metrics = JournalMetrics()
    port = metrics.serve("127.0.0.1", free_port())
    try:
        (sink,) = bridges.build_sinks(load(env={}, overrides={"routes": str(path)}), None, metrics)
        rows = [message("shop", 0, {"k": "a"}), message("shop", 1, {"k": "b"}), message("shop", 2)]
        sink.write_rows(rows, 0)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        metrics.close()
    labels = f'jms_bridge_id="{dest}",sink="kafka.bridge"'
    assert f"jms_bridge_routing_success_total{{{labels}}} 2.0" in text
    failures = [line for line in text.splitlines() if line.startswith("jms_bridge_routing_failure_total{")]
    assert len(failures) == 1 and 'reason="no-key"' in failures[0] and failures[0].endswith(" 1.0")
    prefix = f"jms_bridge_routing_latency_avg{{{labels}}}"
    average = [line for line in text.splitlines() if line.startswith(prefix)]
    assert average and float(average[0].split()[-1]) > 0


def test_each_records_headers_are_the_bridged_headers_of_its_message(tmp_path: Path, names: Any) -> None:
    """Messages no bridge carried take a short way to their headers, bridged ones the full one:
    either way a record carries exactly headers_for(message), and its key."""
    from journal_spark.routes import headers_for

    dest = names("shapes")
    create_topics(dest)
    bridge = f"shapes-{dest}"
    path = routes_file(tmp_path, f"bridge.id={bridge}\nroutes.r.predicate=msg.address==shop\n"
                                 f"routes.r.dest.topic={dest}\nroutes.r.conv.key=msg.header.k\n")
    sink = KafkaSink(load_routes(path))
    no_type = message("shop", 1, {"k": "b", "toymb.content_type": "application/json"})
    del no_type["content_type"]                      # a row without the column keeps the message's own
    rows = [
        message("shop", 0, {"k": "a", "jms.JMSType": "order", "": "empty name", "ü": "ünïcode"}),
        no_type,
        {**message("shop", 2, {"k": "c", "toymb.content_type": "old/type"}), "content_type": ""},
        message("shop", 3, {"k": "d", "jmsbridge.hops": "2", "jmsbridge.origin": "other"}),   # the full way
        message("shop", 4, {"k": "e", "jmsbridge.path": "other@jms:default"}),
        message("shop", 5, {"k": "f", "toymb.content_type": "replaced"}),
    ]
    assert sink.write_rows(rows, 0) == len(rows)
    records = {r.key().decode(): headers_of(r) for r in consume_all(dest, expect=len(rows))}
    assert records == {row["headers"]["k"]: headers_for(row, bridge) for row in rows}
    assert records["d"]["jmsbridge.hops"] == "3" and records["f"]["toymb.content_type"] == "text/plain"


def test_a_message_whose_first_match_is_a_jms_route_is_not_sent_to_kafka(tmp_path: Path, names: Any) -> None:
    dest = names("mixed")
    create_topics(dest)
    path = routes_file(tmp_path, f"""bridge.id={dest}
routes.j.predicate=msg.address==shop && msg.header.to==jms
routes.j.dest.jms.queue=q
routes.k.predicate=msg.address==shop
routes.k.dest.topic={dest}
routes.only-jms.predicate=msg.address==queue-only
routes.only-jms.dest.jms.queue=q
""")
    rows = [message("shop", 0, {"to": "jms"}), message("shop", 1), message("queue-only", 0),
            message("queue-only", 1), message("shop", 2, {"to": "kafka"}), message("shop", 3, {"to": "jms"})]
    sink = KafkaSink(load_routes(path))
    assert sink.write_rows(rows, 0) == 2
    assert sorted(r.key().decode() for r in consume_all(dest, expect=2)) == ["shop-0-1", "shop-0-2"]
    assert sink.done == {"shop": {0: 4}, "queue-only": {0: 2}}     # every row is accounted for


_SOCKETS_TO_KAFKA = """
import os, sys, time
from pathlib import Path
from journal_spark.bridges.kafka import KafkaSink
from journal_spark.routes_file import load_routes

port = int(sys.argv[2])

def connections() -> int:
    # This process's TCP sockets whose remote end is Kafka's port (fds may close while we look).
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                count += 1
    return count

sink = KafkaSink(load_routes(Path(sys.argv[1])))
sink.write_rows([{"id": "shop-0-0", "topic": "shop", "partition": 0, "offset": 0, "key": None, "headers": {},
                  "timestamp": int(time.time() * 1000), "content_type": "text/plain", "body": b"b"}], 0)
print(connections())
sink.close()
time.sleep(1.0)   # what a producer still alive would use to reconnect
print(connections())
"""


def test_close_releases_the_producers_connections(tmp_path: Path, names: Any) -> None:
    """A stopped journal's sink must not keep sockets (and reconnect attempts) to Kafka open."""
    import subprocess
    import sys

    from tests.bridges_kafka.conftest import BOOTSTRAP

    dest = names("closed")
    create_topics(dest)
    path = routes_file(tmp_path, f"bridge.id=close-{dest}\nroutes.all.predicate=msg.address==shop\n"
                                 f"routes.all.dest.topic={dest}\n")
    out = subprocess.run([sys.executable, "-c", _SOCKETS_TO_KAFKA, str(path), BOOTSTRAP.rsplit(":", 1)[1]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    open_before, open_after = (int(line) for line in out.stdout.split())
    assert open_before >= 1, "the sink wrote through at least one connection"
    assert open_after == 0, f"{open_after} connection(s) to Kafka left open after close()"
    assert len(consume_all(dest, expect=1)) == 1
