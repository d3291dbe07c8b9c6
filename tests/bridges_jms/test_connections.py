"""Named JMS connections and their settings, each with an effect: TLS (ActiveMQ's stomp+ssl connector,
with a certificate made by the folder's conftest), vhost and heart-beats (on the wire), and what is
refused at startup."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from journal_spark.bridges.jms import build_sinks
from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.jms.config import DEFAULT_HEARTBEAT_MS, jms_connections
from journal_spark.jms.errors import JmsConfigError, JmsConnectionError
from journal_spark.jms.stompclient import StompClient
from journal_spark.routes_file import load_routes
from tests.bridges_jms.conftest import (
    PrivateActiveMQ,
    connect,
    drain,
    make_certificate,
    send_all,
    unique,
    wait_stored,
    write_routes,
)
from tests.bridges_jms.test_ingress import make_ingress
from tests.support import NodeProcess, wait_until


@pytest.fixture
def tls_activemq(private_activemq: PrivateActiveMQ) -> tuple[PrivateActiveMQ, Path]:
    """The folder's private ActiveMQ (it has a stomp+ssl connector) and its CA (the certificate)."""
    assert private_activemq.ca_file is not None
    return private_activemq, private_activemq.ca_file


@pytest.mark.xdist_group("private-activemq")
@pytest.mark.timeout(240)
def test_two_servers_one_over_tls_in_one_routes_file(
    tls_activemq: tuple[PrivateActiveMQ, Path], node: NodeProcess, tmp_path: Path
) -> None:
    amq_b, ca = tls_activemq
    queue = unique("two")
    routes = write_routes(tmp_path / "two.properties", [
        f"bridge.id={unique('two')}",
        "jms.stomp.port=61613",
        "jms.connection.b.host=127.0.0.1", f"jms.connection.b.port={amq_b.ssl_port}",
        "jms.connection.b.ssl=true", f"jms.connection.b.ssl.ca.file={ca}",
        "routes.to-b.predicate=msg.header.server==b", f"routes.to-b.dest.jms.queue={queue}",
        "routes.to-b.jms.connection=b",
        "routes.to-a.predicate=msg.header.server==a", f"routes.to-a.dest.jms.queue={queue}",
    ])
    sinks = build_sinks(None, None, load_routes(routes), BridgeTelemetry("two"))
    assert sorted(s.name for s in sinks) == ["jms", "jms.b"]
    rows = [{"id": f"m{i}", "topic": "t", "partition": 0, "offset": i, "key": None, "timestamp": 0,
             "content_type": "text/plain", "body": f"to {server}".encode(), "headers": {"server": server}}
            for i, server in enumerate("ab")]
    try:
        assert [s.write_rows(rows, 0) for s in sinks] == [1, 1]
    finally:
        for sink in sinks:
            sink.close()
    assert [f.body for f in drain(f"/queue/{queue}", 1)] == [b"to a"]          # the shared server
    over_tls = StompClient(f"stomp+ssl://127.0.0.1:{amq_b.ssl_port}", ssl_ca_file=str(ca)).connect()
    try:
        over_tls.subscribe(f"/queue/{queue}", "s", ack="auto")
        frame = over_tls.receive(15)
        assert frame is not None and frame.body == b"to b"
        assert frame.headers["jmsbridge_DOT_origin"] == sinks[0].routes.bridge_id
    finally:
        over_tls.close()
    # The JMS ingress over TLS too, from server B into the broker.
    send_all(f"/queue/{queue}-in", [(b"from b", {"persistent": "true"})], url=f"stomp://127.0.0.1:{amq_b.stomp_port}")
    bridge = make_ingress(tmp_path, node.url, f"jms.queue={queue}-in", "from-b", max_batch_time="100",
                          extra=("jms.connection.b.port=" + str(amq_b.ssl_port), "jms.connection.b.ssl=true",
                                 f"jms.connection.b.ssl.ca.file={ca}"), **{"jms.connection": "b"})
    bridge.start()
    try:
        (message,) = wait_stored(node, "from-b", 1)
    finally:
        bridge.stop()
    assert message["headers"]["jmsbridge.path"] == "in-1@jms:b"


@pytest.mark.xdist_group("private-activemq")
@pytest.mark.timeout(120)
def test_tls_refuses_a_server_the_ca_does_not_sign(tls_activemq: tuple[PrivateActiveMQ, Path],
                                                   tmp_path: Path) -> None:
    amq_b, _ca = tls_activemq
    other_ca, _ = make_certificate(tmp_path, "stranger")
    with pytest.raises(JmsConnectionError, match="TLS"):
        StompClient(f"stomp+ssl://127.0.0.1:{amq_b.ssl_port}", ssl_ca_file=str(other_ca), timeout=5).connect()


@pytest.mark.xdist_group("private-activemq")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_packed_sends_arrive_inside_their_transaction_in_order(tls_activemq: tuple[PrivateActiveMQ, Path],
                                                                 tls: bool) -> None:
    """``send_many`` writes its packed frames where stomp.py writes its own. Over TLS that is the
    transport's I/O thread (written from the caller's thread they raced the BEGIN still queued
    there: ActiveMQ's "Invalid transaction id", and the sink committed its marker past a message
    it had lost); over a plain socket, under the transport's socket lock. Many one-message
    transactions (the race), then one of several packed writes; a body with a NUL and no
    content-length arrives whole."""
    amq, ca = tls_activemq
    queue = f"/queue/{unique('packed')}"
    url = f"stomp+ssl://127.0.0.1:{amq.ssl_port}" if tls else amq.url
    client = StompClient(url, ssl_ca_file=str(ca) if tls else None).connect()
    sizes = [1] * 25 + [1500]
    expected: list[bytes] = []
    try:
        for t, size in enumerate(sizes):
            bodies = [f"{t}-{i}:".encode() + b"." * 300 for i in range(size)]
            bodies[-1] += b"\x00after a NUL"
            client.begin(f"tx-{t}")
            sent = client.send_many(((queue, body, {"persistent": "true", "n": f"{t}:{i}\\"})
                                     for i, body in enumerate(bodies)), f"tx-{t}")
            client.commit(f"tx-{t}")
            assert sent == size
            expected += bodies
    finally:
        client.close()
    frames = drain(queue, len(expected), idle=1.0, url=amq.url)
    assert [f.body for f in frames] == expected
    assert frames[-1].headers["n"] == "25:1499\\"


@pytest.mark.timeout(60)
def test_a_frame_refused_inside_a_transaction_fails_its_receipt(activemq: str) -> None:
    """ActiveMQ answers a SEND it refuses (here: a transaction it does not know) with an ERROR frame
    and keeps the connection. The egress's last frame before COMMIT carries a receipt: it must fail,
    so the transaction is never committed past the refused message."""
    queue = f"/queue/{unique('refused')}"
    client = connect()
    try:
        client.begin("tx-real")
        client.send(queue, b"kept", {"persistent": "true"}, transaction="tx-real")
        client.send(queue, b"refused", {"persistent": "true"}, transaction="tx-unknown")
        receipt = client.new_receipt()
        client.send(queue, b"marker", {"persistent": "true", "receipt": receipt}, transaction="tx-real")
        # Both answers are in (the ERROR first) before anyone waits: the receipt alone proves nothing.
        wait_until(lambda: receipt in client.receipts and client.error is not None, timeout=20,
                   what="the ERROR and the receipt")
        with pytest.raises(JmsConnectionError, match="(?i)transaction"):
            client.wait_receipt(receipt)
    finally:
        client.close()
    assert drain(queue, 0, idle=1.0) == [], "closed uncommitted: ActiveMQ rolled the transaction back"


class FakeStompServer:
    """Records the CONNECT frame, answers CONNECTED (with the heart-beat it was asked for), then is
    silent: a peer that hangs without closing the socket."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer  # False: never answers the CONNECT frame
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connect_frame = b""
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        self.conns.append(conn)
        data = b""
        while b"\x00" not in data:
            data += conn.recv(4096)
        self.connect_frame = data
        if not self.answer:
            return
        beat = next((line.split(b":", 1)[1] for line in data.split(b"\n") if line.startswith(b"heart-beat:")),
                    b"0,0")
        conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:" + beat + b"\n\n\x00")

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.server.close()


@pytest.mark.timeout(60)
def test_vhost_and_heartbeats_go_on_the_wire_and_a_silent_server_is_a_lost_connection() -> None:
    fake = FakeStompServer()
    try:
        client = StompClient(f"stomp://127.0.0.1:{fake.port}", vhost="broker-a", heartbeat_ms=300).connect()
        lines = fake.connect_frame.split(b"\n")
        assert b"host:broker-a" in lines and b"heart-beat:300,300" in lines
        began = time.monotonic()
        with pytest.raises(JmsConnectionError, match=f"connection to stomp://127.0.0.1:{fake.port} lost"):
            while time.monotonic() - began < 20:
                client.receive(0.2)
        # The heart-beat watchdog is what noticed (the socket itself stayed open); its note may land
        # just after the disconnect the receive saw.
        wait_until(lambda: client.error == "heart-beat timeout", timeout=5, what="the heart-beat timeout noted")
        client.close()
    finally:
        fake.close()
    quiet = FakeStompServer()             # no heart-beats asked: silence is not a failure
    try:
        client = StompClient(f"stomp://127.0.0.1:{quiet.port}").connect()
        lines = quiet.connect_frame.split(b"\n")
        assert not [line for line in lines if line.startswith(b"heart-beat:") and line != b"heart-beat:0,0"]
        assert b"host:127.0.0.1" in lines
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert client.receive(0.2) is None
        client.close()
    finally:
        quiet.close()


@pytest.mark.timeout(60)
def test_a_server_that_never_answers_connect_is_a_connection_error() -> None:
    # stomp.py's own wait for CONNECTED has no deadline: a broker that accepts the socket and then
    # hangs held the connecting thread (an egress, an ingress, a test's sender) for ever.
    mute = FakeStompServer(answer=False)
    try:
        with pytest.raises(JmsConnectionError, match="no CONNECTED frame"):
            StompClient(f"stomp://127.0.0.1:{mute.port}", timeout=1).connect()
        assert b"accept-version:1.2" in mute.connect_frame  # it did ask
    finally:
        mute.close()


@pytest.mark.parametrize(("lines", "message"), [
    (["jms.connection.b.hostname=x"], "unknown JMS connection key 'jms.connection.b.hostname'"),
    (["jms.connection.default.host=x"], "the connection 'default' is the jms.stomp.* one"),
    (["jms.stomp.heartbeat.ms=5"], "heartbeat.ms must be 0"),
    (["jms.connection.b.port=99999"], "must be a TCP port"),
    (["jms.stomp.ssl.ca.file=/nonexistent.pem", "jms.stomp.ssl=true"], "cannot be read"),
    (["jms.stomp.ssl.ca.file=/etc/hostname"], "ssl is not true"),
    (["jms.stomp.ssl=maybe"], "must be true or false"),
    (["routes.r.predicate=msg.address==a", "routes.r.dest.jms.queue=q", "routes.r.jms.connection=nowhere"],
     "names the JMS connection 'nowhere', which is not defined"),
    (["routes.r.predicate=msg.address==a", "routes.r.dest.jms.queue=q", "jms.egress.management.port=x"],
     "management.port must be a TCP port"),
])
def test_connection_settings_are_refused_at_startup(tmp_path: Path, lines: list[str], message: str) -> None:
    routes = load_routes(write_routes(tmp_path / "bad.properties", ["bridge.id=x", *lines]))
    with pytest.raises(JmsConfigError, match=message):
        jms_connections(routes.settings)
        build_sinks(None, None, routes, BridgeTelemetry("x"))


def test_an_ingress_naming_an_undefined_connection_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JmsConfigError, match="JMS ingress i: no JMS connection named 'nowhere'"):
        make_ingress(tmp_path, "http://127.0.0.1:1", "jms.queue=q", "t", **{"jms.connection": "nowhere"})



def test_heartbeats_are_on_unless_a_connection_turns_them_off(tmp_path: Path) -> None:
    """On by default: a frozen bridge's connection is then closed by ActiveMQ, which takes back its
    marker (tests/journal/test_takeover.py shows the standby exporting meanwhile)."""
    routes = load_routes(write_routes(tmp_path / "r.properties", [
        "bridge.id=x", "jms.connection.b.host=127.0.0.1", "jms.connection.c.heartbeat.ms=0"]))
    connections = jms_connections(routes.settings)
    assert connections["default"].heartbeat_ms == connections["b"].heartbeat_ms == DEFAULT_HEARTBEAT_MS == 5000
    assert connections["c"].heartbeat_ms == 0
    assert connections["default"].client_options()["heartbeat_ms"] == 5000
