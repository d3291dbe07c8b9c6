"""The routes file: what is accepted, and every refusal names the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nats_bridge.config import load_settings
from nats_bridge.errors import NatsConfigError

from .conftest import write_routes

RR = ["nats-bridge.a.type=request-reply", "nats-bridge.a.source.nats.subject=svc.a", "nats-bridge.a.dest.jms.queue=a"]


def load(tmp_path: Path, lines: list[str]) -> object:
    return load_settings(write_routes(tmp_path / "routes.properties", lines))


def test_a_full_file_is_read_with_its_values(tmp_path: Path) -> None:
    settings = load_settings(write_routes(tmp_path / "r.properties", [
        "bridge.id=edge-9", "nats.servers=nats://10.0.0.1:4222, nats://10.0.0.2:4222", "nats.user=u",
        "nats.password=p", "nats.reconnect.wait.ms=100", "jms.stomp.host=amq", "jms.stomp.port=61614",
        "jms.reconnect.initial.ms=50", "jms.reconnect.max.ms=2000",
        "routes.r.predicate=msg.address==x", "routes.r.dest.topic=y",          # the journal job's: left to it
        *RR, "nats-bridge.a.queue-group=g", "nats-bridge.a.headers=nats", "nats-bridge.a.timeout.ms=750",
        "nats-bridge.a.max-in-flight=9", "nats-bridge.a.reply.jms.queue=a.replies",
        "nats-bridge.b.type=forward", "nats-bridge.b.source.jms.queue=b", "nats-bridge.b.dest.nats.subject=out.b",
        "nats-bridge.b.dest.jetstream=true",
        "nats-bridge.c.type=request-reply", "nats-bridge.c.source.jms.queue=c", "nats-bridge.c.dest.nats.subject=c",
        "nats-bridge.c.reply.nats.prefix=replies.c",
    ]))
    c = settings.connections
    assert settings.bridge_id == "edge-9"
    assert c.nats_servers == ("nats://10.0.0.1:4222", "nats://10.0.0.2:4222") and c.nats_user == "u"
    assert (c.stomp_host, c.stomp_port, c.jms_reconnect_initial_s, c.jms_reconnect_max_s) == ("amq", 61614, .05, 2)
    a, b, cc = settings.bridges
    assert (a.direction, a.queue_group, a.headers, a.timeout_s, a.max_in_flight, a.reply_jms_queue) == (
        "nats-to-jms", "g", "nats", .75, 9, "a.replies")
    assert (b.type, b.direction, b.dest_jetstream) == ("forward", "jms-to-nats", True)
    assert cc.reply_nats_prefix == "replies.c"


@pytest.mark.parametrize(("lines", "key"), [
    (["nats.colour=red", *RR], "nats.colour"),
    (["nats-bridge.a.retries=3", *RR], "nats-bridge.a.retries"),
    (["something.else=1", *RR], "something.else"),
    ([], "nats-bridge.<name>.type"),
    (["nats-bridge.a.type=dynamic-forward", *RR[1:]], "nats-bridge.a.type"),
    ([RR[0], RR[2]], "nats-bridge.a.source"),
    ([*RR, "nats-bridge.a.source.jms.queue=x"], "nats-bridge.a.source"),
    ([RR[0], RR[1], "nats-bridge.a.dest.nats.subject=x"], "nats-bridge.a.dest.nats.subject"),
    ([*RR, "nats-bridge.a.headers=json"], "nats-bridge.a.headers"),
    ([*RR, "nats-bridge.a.timeout.ms=0"], "nats-bridge.a.timeout.ms"),
    ([*RR, "nats-bridge.a.timeout.ms=soon"], "nats-bridge.a.timeout.ms"),
    ([*RR, "nats-bridge.a.max-in-flight=0"], "nats-bridge.a.max-in-flight"),
    ([*RR, "nats-bridge.a.reply.nats.prefix=r"], "nats-bridge.a.reply.nats.prefix"),
    ([*RR, "nats-bridge.a.dest.jetstream=true"], "nats-bridge.a.dest.jetstream"),
    ([*RR, "nats-bridge.a.source.jetstream.durable=d"], "nats-bridge.a.source.jetstream.durable"),
    ([*RR, "nats-bridge.a.dest.jetstream=maybe"], "nats-bridge.a.dest.jetstream"),
    (["nats-bridge.f.type=forward", "nats-bridge.f.source.jms.queue=q", "nats-bridge.f.dest.nats.subject=s",
      "nats-bridge.f.timeout.ms=5"], "nats-bridge.f.timeout.ms"),
    (["nats-bridge.f.type=forward", "nats-bridge.f.source.jms.queue=q", "nats-bridge.f.dest.nats.subject=s",
      "nats-bridge.f.queue-group=g"], "nats-bridge.f.queue-group"),
    (["nats-bridge.f.type=forward", "nats-bridge.f.source.jms.queue=q", "nats-bridge.f.dest.nats.subject=s.*"],
     "nats-bridge.f.dest.nats.subject"),
    (["nats-bridge.f.type=forward", "nats-bridge.f.source.nats.subject=s", "nats-bridge.f.dest.jms.queue=q",
      "nats-bridge.f.source.jetstream.durable=d", "nats-bridge.f.queue-group=g"], "nats-bridge.f.queue-group"),
    (["nats-bridge.c.type=request-reply", "nats-bridge.c.source.jms.queue=c", "nats-bridge.c.dest.nats.subject=c",
      "nats-bridge.c.reply.jms.queue=r"], "nats-bridge.c.reply.jms.queue"),
    ([*RR[:2], "nats-bridge.a.dest.jms.queue=bad queue!"], "nats-bridge.a.dest.jms.queue"),
    (["nats-bridge.a.type=request-reply", "nats-bridge.a.source.nats.subject=a..b", "nats-bridge.a.dest.jms.queue=q"],
     "nats-bridge.a.source.nats.subject"),
    (["nats.servers=http://x:1", *RR], "nats.servers"),
    ([*RR, "nats-bridge.a.broker.url=http://x"], "nats-bridge.a.broker.url"),
    (["nats-bridge.i.type=ingress", "nats-bridge.i.source.nats.subject=s", "nats-bridge.i.dest.topic=t",
      "nats-bridge.i.broker.url=http://x"], "nats-bridge.i.source.jetstream.durable"),
    (["nats-bridge.i.type=ingress", "nats-bridge.i.source.nats.subject=s", "nats-bridge.i.dest.topic=t",
      "nats-bridge.i.broker.url=http://x", "nats-bridge.i.source.jetstream.durable=d",
      "nats-bridge.i.timeout.ms=5"], "nats-bridge.i.timeout.ms"),
    (["nats-bridge.i.type=ingress", "nats-bridge.i.source.nats.subject=s", "nats-bridge.i.dest.topic=t t",
      "nats-bridge.i.broker.url=http://x", "nats-bridge.i.source.jetstream.durable=d"], "nats-bridge.i.dest.topic"),
    (["nats-bridge.i.type=ingress", "nats-bridge.i.source.nats.subject=s", "nats-bridge.i.dest.topic=t",
      "nats-bridge.i.broker.url=ftp://x", "nats-bridge.i.source.jetstream.durable=d"], "nats-bridge.i.broker.url"),
    (["nats.token=t", "nats.user=u", *RR], "nats.token"),
    (["jms.stomp.port=70000", *RR], "jms.stomp.port"),
    (["jms.reconnect.initial.ms=500", "jms.reconnect.max.ms=100", *RR], "jms.reconnect.max.ms"),
    # Connection settings of the journal job's STOMP client that this bridge's client does not honour.
    (["jms.stomp.ssl=true", *RR], "jms.stomp.ssl"),
    (["jms.stomp.vhost=prod", *RR], "jms.stomp.vhost"),
    (["jms.stomp.heartbeat.ms=5000", *RR], "jms.stomp.heartbeat.ms"),
])
def test_invalid_settings_stop_startup_naming_the_key(tmp_path: Path, lines: list[str], key: str) -> None:
    with pytest.raises(NatsConfigError) as caught:
        load(tmp_path, lines)
    assert key in str(caught.value)


def test_the_command_refuses_a_bad_file_before_connecting(tmp_path: Path) -> None:
    routes = write_routes(tmp_path / "r.properties", [*RR, "nats-bridge.a.max-in-flight=-4"])
    done = subprocess.run([sys.executable, "-m", "broker", "bridge", "nats", "--routes", str(routes)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "nats-bridge.a.max-in-flight" in done.stderr
