"""The HTTP server itself under attack (issue 13, items 5 and 13), with real sockets against real nodes.

Idle sockets must not freeze a node, drip-fed headers and idle connections are closed, a long
poll is never cut, ambiguous framing is refused, and every error waitress answers is JSON.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from broker import config
from broker.errors import ConfigError
from tests.support import ROOT, NodeProcess, wait_until

TIMEOUT = 20.0  # generous bound for anything the node must do "promptly"
STATUS_LINE = re.compile(rb"HTTP/1\.[01] \d{3} ")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node with the default cap and timeouts."""
    with NodeProcess(tmp_path_factory.mktemp("hardening")) as proc:
        yield proc


def _connect(proc: NodeProcess, timeout: float = TIMEOUT) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proc.port), timeout=timeout)


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed ``sock`` (EOF or reset); never blocks."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails if it does not, in time)."""
    sock.settimeout(TIMEOUT)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open; got {data[:300]!r}") from None
        if not chunk:
            return data
        data += chunk


def _json_error(raw: bytes, status: int) -> dict[str, Any]:
    """The one response in ``raw``: its status is ``status`` and its body is a JSON error like the app's."""
    assert len(STATUS_LINE.findall(raw)) == 1, f"expected exactly one response, got {raw[:600]!r}"
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    assert status_line.split()[1] == str(status), raw[:600]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    assert headers["content-type"].startswith("application/json"), headers
    assert headers.get("connection", "").lower() == "close", headers
    parsed = json.loads(body)
    assert isinstance(parsed["error"], str) and parsed["error"], parsed
    assert isinstance(parsed["message"], str) and parsed["message"], parsed
    return dict(parsed)


def _exchange(proc: NodeProcess, raw: bytes) -> bytes:
    with _connect(proc) as sock:
        sock.sendall(raw)
        return _read_until_closed(sock)


def _publish(proc: NodeProcess, topic: str = "hardening") -> None:
    r = requests.post(f"{proc.url}/v1/topics/{topic}/messages", json={"body": "still here"}, timeout=TIMEOUT)
    assert r.status_code == 201, r.text


# --- connection cap ------------------------------------------------------------------------------


def test_1500_idle_connections_do_not_freeze_the_node(node: NodeProcess) -> None:
    idle: list[socket.socket] = []
    try:
        for _ in range(1500):
            try:
                idle.append(_connect(node, timeout=5))
            except OSError:
                break  # the old server stopped accepting: the backlog filled up
        assert requests.get(node.url + "/health", timeout=TIMEOUT).status_code == 200
        _publish(node)
        assert len(idle) == 1500
        # Past the cap (1000), the node closed the least recently active idle connections.
        wait_until(lambda: sum(_closed_by_server(s) for s in idle) >= 1500 - 1000, timeout=TIMEOUT,
                   what="the oldest idle connections closed")
    finally:
        for sock in idle:
            sock.close()


def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_a_json_503(tmp_path: Path) -> None:
    # 16 threads: up to 8 long polls may wait (half the threads), so the four below all hold on.
    env = {"TOYMB_MAX_CONNECTIONS": "4", "TOYMB_THREADS": "16"}
    with NodeProcess(tmp_path, env=env) as proc:
        # Set up over connections the node has closed (read until EOF): a connection whose answer
        # was sent may still count as busy for a moment, and would take one of the four places.
        _exchange(proc, b'POST /v1/topics/busy/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n'
                        b'Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{"body": 1}')
        registered = _exchange(proc, b'POST /v1/topics/busy/groups/g/subscribers HTTP/1.1\r\nHost: x\r\n'
                                     b'Connection: close\r\nContent-Type: application/json\r\n'
                                     b'Content-Length: 16\r\n\r\n{"mode": "pull"}')
        assert registered.startswith(b"HTTP/1.1 201"), registered[:300]
        sid = json.loads(registered.partition(b"\r\n\r\n")[2])["subscriber_id"]
        polls = [_connect(proc) for _ in range(4)]
        for sock in polls:  # four long polls hold every connection the node allows
            sock.sendall(f"GET /v1/topics/busy/groups/g/messages?subscriber={sid}&wait_ms=10000 HTTP/1.1\r\n"
                         "Host: x\r\nConnection: close\r\n\r\n".encode())
        # Let the node read the four requests: until then they are connections still sending headers,
        # which the cap may close. Nothing outside shows the read (the cap leaves no room to ask), so
        # this waits a generous 3 s of the polls' 10 s.
        time.sleep(3.0)
        with _connect(proc) as newcomer:
            body = _json_error(_read_until_closed(newcomer), 503)
        assert body["error"] == "unavailable"
        for sock in polls:  # none of the busy connections was sacrificed
            with sock:
                assert _read_until_closed(sock).startswith(b"HTTP/1.1 200"), "a long poll was cut"
        assert requests.get(proc.url + "/health", timeout=TIMEOUT).status_code == 200


# --- timeouts ------------------------------------------------------------------------------------


def test_a_header_drip_fed_slowloris_style_is_closed_and_others_are_served(quick: NodeProcess) -> None:
    with _connect(quick) as sock:
        sock.sendall(b"POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + TIMEOUT
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b"X-Drip: a\r\n")  # a byte now and then keeps an inactivity timeout happy
            except OSError:
                closed = True
                break
            closed = _closed_by_server(sock)
            assert requests.get(quick.url + "/health", timeout=TIMEOUT).status_code == 200
            time.sleep(0.3)
        assert closed, "a request whose headers never end kept its connection"


def test_an_idle_connection_is_closed_after_the_idle_timeout(quick: NodeProcess) -> None:
    with _connect(quick) as silent, _connect(quick) as kept_alive:
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        kept_alive.settimeout(TIMEOUT)
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        wait_until(lambda: _closed_by_server(silent), timeout=TIMEOUT, what="a silent connection closed")
        wait_until(lambda: _closed_by_server(kept_alive), timeout=TIMEOUT, what="an idle keep-alive closed")


def test_a_long_poll_longer_than_the_idle_timeout_completes(quick: NodeProcess) -> None:
    _publish(quick, "longpoll")
    sid = requests.post(f"{quick.url}/v1/topics/longpoll/groups/g/subscribers", json={"mode": "pull"},
                        timeout=TIMEOUT).json()["subscriber_id"]  # starts at latest: the poll waits it out
    started = time.monotonic()
    r = requests.get(f"{quick.url}/v1/topics/longpoll/groups/g/messages",
                     params={"subscriber": sid, "wait_ms": "4000"}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json() == {"messages": []}
    assert time.monotonic() - started >= 3.5  # it really waited past the 1.5 s idle timeout


def test_a_long_poll_gets_a_message_published_after_the_idle_timeout(quick: NodeProcess) -> None:
    _publish(quick, "latepoll")
    sid = requests.post(f"{quick.url}/v1/topics/latepoll/groups/g/subscribers", json={"mode": "pull"},
                        timeout=TIMEOUT).json()["subscriber_id"]
    result: dict[str, Any] = {}

    def poll() -> None:
        result["r"] = requests.get(f"{quick.url}/v1/topics/latepoll/groups/g/messages",
                                   params={"subscriber": sid, "wait_ms": "10000"}, timeout=TIMEOUT)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(3.0)  # twice the idle timeout
    _publish(quick, "latepoll")
    poller.join(TIMEOUT)
    assert "r" in result and result["r"].status_code == 200
    assert [m["body"] for m in result["r"].json()["messages"]] == ["still here"]


# --- framing and JSON errors ---------------------------------------------------------------------

SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(("name", "framing", "body"), [
    ("chunked_and_length", b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n" + SMUGGLED),
    ("length_and_chunked", b"Content-Length: 40\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    ("two_lengths", b"Content-Length: 2\r\nContent-Length: 40\r\n", b"{}" + SMUGGLED),
    ("two_equal_lengths", b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"),
    ("chunked_twice", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
    ("chunked_listed_twice", b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n"),
    ("gzip_chunked", b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
    ("identity", b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n", b"{}"),
    ("bad_length", b"Content-Length: 12abc\r\n", b"{}"),
    ("signed_length", b"Content-Length: +2\r\n", b"{}"),
    # waitress's int() raised on over 4,300 digits, uncaught: the connection closed with no answer.
    pytest.param("huge_length", b"Content-Length: " + b"9" * 5000 + b"\r\n", b"{}", id="huge_length"),
    pytest.param("zero_padded_length", b"Content-Length: " + b"0" * 4999 + b"2\r\n", b"{}", id="zero_padded_length"),
    ("bad_chunk_size", b"Transfer-Encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n"),
    ("unterminated_chunk", b"Transfer-Encoding: chunked\r\n", b"2\r\n{}XX0\r\n\r\n"),
])
def test_ambiguous_or_bad_framing_is_a_json_400_and_closes_the_connection(
        node: NodeProcess, name: str, framing: bytes, body: bytes) -> None:
    raw = (b"POST /v1/topics/framing/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           + framing + b"\r\n" + body)
    error = _json_error(_exchange(node, raw), 400)  # one response: the smuggled GET was never served
    assert error["error"] == "bad_request"


def test_transfer_encoding_on_http_1_0_is_refused(node: NodeProcess) -> None:
    raw = (b"POST /v1/topics/framing/messages HTTP/1.0\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}")
    assert _json_error(_exchange(node, raw), 400)["error"] == "bad_request"
    raw = b"POST /v1/topics/framing/messages HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert "HTTP/1.1" in _json_error(_exchange(node, raw), 400)["message"]


def test_a_well_framed_chunked_publish_still_works(node: NodeProcess) -> None:
    payload = json.dumps({"body": "chunked"}).encode()
    raw = (b"POST /v1/topics/framing/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           + f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n")
    assert _exchange(node, raw).startswith(b"HTTP/1.1 201")


def test_an_oversized_header_is_a_json_431(node: NodeProcess) -> None:
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300_000 + b"\r\n\r\n"
    with _connect(node) as sock:
        sender = threading.Thread(target=lambda: _send_quietly(sock, raw))
        sender.start()
        response = _read_until_closed(sock)
        sender.join(TIMEOUT)
    assert _json_error(response, 431)["error"] == "request_header_fields_too_large"


def _send_quietly(sock: socket.socket, raw: bytes) -> None:
    try:
        sock.sendall(raw)
    except OSError:
        pass  # the server answered and closed before reading everything: that is the point


def test_a_body_over_the_limit_is_a_json_413_before_it_is_read(node: NodeProcess) -> None:
    raw = (b"POST /v1/topics/framing/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 999999999\r\n\r\n")  # no body sent: the node must answer from the header alone
    error = _json_error(_exchange(node, raw), 413)
    assert error["error"] == "payload_too_large" and error["limit"] == "request"


def test_a_chunked_body_over_the_limit_is_a_json_413(tmp_path: Path) -> None:
    with NodeProcess(tmp_path, env={"TOYMB_MAX_REQUEST": "1000"}) as proc, _connect(proc) as sock:
        sock.sendall(b"POST /v1/topics/framing/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"800\r\n" + b"a" * 0x800 + b"\r\n")
        error = _json_error(_read_until_closed(sock), 413)
    assert error["error"] == "payload_too_large" and error["max"] == 1000


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["TOYMB_MAX_CONNECTIONS", "TOYMB_IDLE_TIMEOUT_MS", "TOYMB_HEADER_TIMEOUT_MS"])
@pytest.mark.parametrize("value", ["0", "-1", "ten", ""])
def test_bad_server_settings_are_refused(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable}: bad value"):  # not "unknown variable"
        config.load(env={variable: value})


def test_the_server_settings_default_sensibly() -> None:
    settings = config.load(env={})
    assert settings.max_connections == 1000
    assert settings.idle_timeout_ms == 30000
    assert settings.header_timeout_ms == 10000


def test_a_cap_beyond_the_open_files_limit_stops_the_node_with_a_message(tmp_path: Path) -> None:
    proc = NodeProcess(tmp_path, env={"TOYMB_MAX_CONNECTIONS": str(10**8)}).start(wait=False)
    assert proc.proc is not None
    assert proc.proc.wait(timeout=60) != 0
    assert "max_connections" in proc.log_tail() and "Traceback" not in proc.log_tail()


def test_a_low_soft_open_files_limit_is_raised_for_the_cap() -> None:
    script = ("import resource\n"
              "from broker.aserver import FD_RESERVE, ensure_fd_limit\n"
              "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))\n"
              "ensure_fd_limit(1000)\n"
              "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 1000 + FD_RESERVE)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def _node_with_8_mib_queued(tmp_path: Path) -> tuple[NodeProcess, str]:
    """A node holding eight 1 MiB messages, and a pull subscriber that may fetch them in one answer."""
    proc = NodeProcess(tmp_path / "node", env={"TOYMB_FETCH_MAX_BYTES": str(16 << 20)}).start()
    assert requests.put(f"{proc.url}/v1/topics/draining", json={"partitions": 1}, timeout=TIMEOUT).ok
    sid = requests.post(f"{proc.url}/v1/topics/draining/groups/g/subscribers", json={"mode": "pull"},
                        timeout=TIMEOUT).json()["subscriber_id"]
    for n in range(8):   # 1 MiB each, the largest body a message may have
        r = requests.post(f"{proc.url}/v1/topics/draining/messages",
                          json={"id": f"big-{n}", "body": "x" * ((1 << 20) - 2)}, timeout=TIMEOUT)
        assert r.status_code == 201, r.text
    return proc, sid


def _fetch_8_mib(proc: NodeProcess, sid: str) -> socket.socket:
    """A client that asks for the 8 MiB and has read the first bytes of the answer, with a small window."""
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # the answer cannot all be in flight
    slow.settimeout(TIMEOUT)
    slow.connect(("127.0.0.1", proc.port))
    slow.sendall(f"GET /v1/topics/draining/groups/g/messages?subscriber={sid}&max=8 HTTP/1.1\r\n"
                 "Host: x\r\n\r\n".encode())
    return slow


def test_sigterm_stops_the_node_though_clients_hold_keep_alive_connections(tmp_path: Path) -> None:
    """Peers' forwarders keep connections open; a node told to stop must not wait for them to hang up.

    An answer still being sent (8 MiB to a client that reads slowly) is sent whole before its
    connection is closed, however long that takes on a loaded machine, as long as it progresses.
    """
    proc, sid = _node_with_8_mib_queued(tmp_path)
    try:
        idle = []
        for _ in range(3):
            sock = _connect(proc)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}\n"):   # the whole JSON answer, so nothing is left unread
                answer += sock.recv(65536)
            assert STATUS_LINE.match(answer)
            idle.append(sock)   # kept open, as a keep-alive client does
        slow = _fetch_8_mib(proc, sid)
        received = slow.recv(4096)   # the answer has begun: the node is sending it
        assert STATUS_LINE.match(received)
        proc.signal(signal.SIGTERM)
        received += _read_until_closed(slow)
        head, _, body = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        assert len(body) == length > 8_000_000 and len(json.loads(body)["messages"]) == 8
        assert proc.proc is not None
        assert proc.proc.wait(timeout=TIMEOUT) == 0
        for sock in idle:
            assert _read_until_closed(sock) == b""
    finally:
        proc.stop()


def test_sigterm_cuts_an_answer_its_client_stopped_reading(tmp_path: Path) -> None:
    """A client that stops reading mid-answer cannot hold a stopping node: its connection is cut."""
    proc, sid = _node_with_8_mib_queued(tmp_path)
    try:
        stuck = _fetch_8_mib(proc, sid)
        received = stuck.recv(4096)   # the answer has begun; this client reads no more of it
        assert STATUS_LINE.match(received)
        proc.signal(signal.SIGTERM)
        assert proc.proc is not None
        assert proc.proc.wait(timeout=60) == 0   # a hang guard: the cut comes after 5 s without progress
        received += _read_until_closed(stuck)
        head, _, body = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        assert len(body) < length, "the whole answer fit in the buffers: the client did not stall the node"
    finally:
        proc.stop()
