"""The node's own HTTP server (broker.aserver) against hostile and odd clients, on real nodes.

What it does that waitress did not do the same way: llhttp parsing fed by whatever packets
arrive, pipelined requests parsed ahead and answered in order, reading paused while requests
wait, a refusal in the middle of a pipeline, answers handed to the loop so that a client that
stops reading holds no worker thread.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import NodeProcess

from .test_inline_publish import read_replies, request
from .test_server_hardening import _closed_by_server, _json_error, _read_until_closed

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("aserver"), env={"TOYMB_INLINE_PUBLISH": "true"}) as proc:
        yield proc


def _connect(node: NodeProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _publish(node: NodeProcess, topic: str, msg_id: str) -> int:
    r = requests.post(f"{node.url}/v1/topics/{topic}/messages", json={"id": msg_id, "body": msg_id}, timeout=TIMEOUT)
    return r.status_code


def test_a_request_sent_a_byte_per_packet_is_answered(node: NodeProcess) -> None:
    raw = request("drip", json.dumps({"id": "dripped", "body": "d"}).encode())
    with _connect(node) as sock:
        for byte in raw:
            sock.send(bytes([byte]))
            time.sleep(0.001)   # each byte its own segment (TCP_NODELAY)
        (status, _, body), = read_replies(sock, 1)
    assert status == 201 and body["id"] == "dripped"


def test_blank_lines_dripped_forever_do_not_hold_a_connection(quick: NodeProcess) -> None:
    # llhttp skips blank lines before a request, so they start no request (no header timeout):
    # they must not count as activity either.
    with _connect(quick) as sock:
        deadline = time.monotonic() + TIMEOUT
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b"\r\n")
            except OSError:
                break
            closed = _closed_by_server(sock)
            time.sleep(0.3)
        assert closed or time.monotonic() < deadline, "a connection sending only blank lines was kept"


def test_a_bad_request_in_a_pipeline_is_a_json_400_after_the_answers_before_it(node: NodeProcess) -> None:
    assert _publish(node, "piped-bad", "first") == 201
    raw = (request("piped-bad", b'{"id": "before", "body": 1}')
           + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
           + b"NOT\x01HTTP AT ALL\r\n\r\n"
           + request("piped-bad", b'{"id": "after", "body": 2}'))
    with _connect(node) as sock:
        sock.sendall(raw)
        answers = _read_until_closed(sock)
    first, _, rest = answers.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 201"), answers[:300]
    head = rest.index(b"HTTP/1.1 200")
    third = rest.index(b"HTTP/1.1 400", head)
    assert _json_error(rest[third:], 400)["error"] == "bad_request"
    # The request after the bad one was never served: its id is still free.
    assert _publish(node, "piped-bad", "after") == 201
    assert _publish(node, "piped-bad", "before") == 200   # stored once, by the pipeline


def test_hundreds_of_pipelined_publishes_are_answered_in_order(node: NodeProcess) -> None:
    assert _publish(node, "piped-many", "warm") == 201
    raw = [request("piped-many", json.dumps({"id": f"m{i}", "body": i}).encode()) for i in range(300)]
    with _connect(node) as sock:
        sock.sendall(b"".join(raw))   # far more than one read: reading pauses and resumes
        replies = read_replies(sock, 300)
    assert [r[0] for r in replies] == [201] * 300
    assert [r[2]["id"] for r in replies] == [f"m{i}" for i in range(300)]


def test_expect_100_continue_is_answered_before_the_body(node: NodeProcess) -> None:
    body = b'{"id": "expected", "body": 1}'
    head = (f"POST /v1/topics/expect/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode()
    with _connect(node) as sock:
        sock.sendall(head)
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        (status, _, answer), = read_replies(sock, 1)
    assert status == 201 and answer["id"] == "expected"


def test_a_client_that_half_closes_after_its_request_gets_the_answer(node: NodeProcess) -> None:
    with _connect(node) as sock:
        sock.sendall(request("halfclosed", b'{"id": "half", "body": 1}'))
        sock.shutdown(socket.SHUT_WR)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 201") and b'"half"' in answer


def test_an_upgrade_request_is_served_as_http_1_1_with_its_body_and_what_follows(node: NodeProcess) -> None:
    # Java's HttpClient asks for h2c on every request; llhttp stops at such a request's headers.
    body = b'{"id": "upgraded", "body": 1}'
    raw = (b"POST /v1/topics/upgrade/messages HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
           b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQBAAAAAAIAAAAA\r\nContent-Type: application/json\r\n"
           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
    with _connect(node) as sock:
        sock.sendall(raw)
        time.sleep(0.2)   # the rest of the body in a later read
        sock.sendall(body[10:] + request("upgrade", b'{"id": "next", "body": 2}'))
        replies = read_replies(sock, 2)
    assert [(r[0], r[2]["id"]) for r in replies] == [(201, "upgraded"), (201, "next")]


def test_an_oversized_request_line_is_a_json_431(node: NodeProcess) -> None:
    with _connect(node) as sock:
        try:
            sock.sendall(b"GET /health?" + b"q" * 300_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        except OSError:
            pass   # answered and closed before it read everything
        answer = _read_until_closed(sock)
    assert _json_error(answer, 431)["error"] == "request_header_fields_too_large"


def test_too_many_headers_are_a_json_431(node: NodeProcess) -> None:
    headers = b"".join(b"X-%d: v\r\n" % n for n in range(2000))   # 20 KB: within the size limit
    with _connect(node) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        answer = _read_until_closed(sock)
    assert _json_error(answer, 431)["error"] == "request_header_fields_too_large"


def test_a_body_of_one_byte_chunks_is_taken_whole(node: NodeProcess) -> None:
    payload = json.dumps({"id": "crumbs", "body": "c" * 3000}).encode()
    chunks = b"".join(b"1\r\n%c\r\n" % byte for byte in payload)
    with _connect(node) as sock:
        sock.sendall(b"POST /v1/topics/crumbs/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
        (status, _, answer), = read_replies(sock, 1)
    assert status == 201 and answer["id"] == "crumbs"
    fetched = requests.get(f"{node.url}/v1/topics/crumbs", timeout=TIMEOUT).json()
    assert sum(fetched["end_offsets"].values()) == 1


def test_clients_that_never_read_large_answers_hold_no_worker_thread(tmp_path: Path) -> None:
    """Two worker threads, three clients that asked for 8 MiB and read nothing: the node still
    answers others through its workers, since a worker hands an answer over and goes."""
    env = {"TOYMB_THREADS": "2", "TOYMB_FETCH_MAX_BYTES": str(16 << 20)}
    with NodeProcess(tmp_path, env=env) as proc:
        assert requests.put(f"{proc.url}/v1/topics/hoard", json={"partitions": 1}, timeout=TIMEOUT).ok
        sids = [requests.post(f"{proc.url}/v1/topics/hoard/groups/g{n}/subscribers", json={"mode": "pull"},
                              timeout=TIMEOUT).json()["subscriber_id"] for n in range(3)]
        for n in range(8):
            r = requests.post(f"{proc.url}/v1/topics/hoard/messages",
                              json={"id": f"big-{n}", "body": "x" * ((1 << 20) - 2)}, timeout=TIMEOUT)
            assert r.status_code == 201, r.text
        stuck = []
        try:
            for n, sid in enumerate(sids):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(TIMEOUT)
                sock.connect(("127.0.0.1", proc.port))
                sock.sendall(f"GET /v1/topics/hoard/groups/g{n}/messages?subscriber={sid}&max=8 HTTP/1.1\r\n"
                             "Host: x\r\n\r\n".encode())
                assert sock.recv(16).startswith(b"HTTP/1.1 200")   # the answer has begun; no more is read
                stuck.append(sock)
            for _ in range(5):   # more requests than worker threads, each needing one
                assert requests.get(f"{proc.url}/v1/topics/hoard", timeout=TIMEOUT).status_code == 200
            assert requests.post(f"{proc.url}/v1/topics/hoard/messages", json={"body": "after"},
                                 headers={"Connection": "close"}, timeout=TIMEOUT).status_code == 201
        finally:
            for sock in stuck:
                sock.close()
