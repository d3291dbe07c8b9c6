"""Publishes answered without a thread waiting for the commit (the inline way).

A node takes a small publish to a topic it knows inline: validated on the server's loop thread
(``TOYMB_INLINE_PUBLISH``) or on a worker thread (the default), then answered by the commit
through the loop. The first publish to a new topic, a large body, ``Connection: close`` and
HTTP/1.0 still take the whole way through the app. Both ways must answer alike, keep the order of
pipelined answers, and survive clients that leave before their answer, wherever the inline way runs.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.api.fast_publish import INLINE_MAX_BYTES
from tests.support import NodeProcess, wait_until

Reply = tuple[int, dict[str, str], Any]


@pytest.fixture(scope="module", params=["true", "false"], ids=["on-the-loop", "on-a-worker"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("inline"), env={"TOYMB_MAX_BODY": "1048576",
                                                             "TOYMB_INLINE_PUBLISH": request.param}) as proc:
        yield proc


def request(topic: str, body: bytes, *, extra: str = "", version: str = "1.1") -> bytes:
    return (f"POST /v1/topics/{topic}/messages HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def read_replies(sock: socket.socket, count: int) -> list[Reply]:
    """``count`` HTTP answers from ``sock``, framed by their Content-Length."""
    data = b""
    replies: list[Reply] = []
    while len(replies) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(replies)} answers"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(data) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside an answer"
            data += chunk
        replies.append((int(lines[0].split()[1]), headers, json.loads(data[:length])))
        data = data[length:]
    return replies


def exchange(node: NodeProcess, *raw: bytes) -> list[Reply]:
    """Send ``raw`` requests in one write (pipelined) and read their answers."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=20) as sock:
        sock.sendall(b"".join(raw))
        return read_replies(sock, len(raw))


def shape(reply: Reply) -> tuple[int, list[str], list[str]]:
    status, headers, body = reply
    return status, sorted(k for k in headers if k != "date"), sorted(body) if isinstance(body, dict) else body


def test_inline_answers_look_like_worker_answers(node: NodeProcess) -> None:
    one = json.dumps({"key": "k", "body": {"n": 1}}).encode()
    first, = exchange(node, request("alike", one))           # a new topic: a worker creates it
    second, = exchange(node, request("alike", one))          # a known topic: inline
    closing, = exchange(node, request("alike", one, extra="Connection: close\r\n"))  # a worker
    assert first[0] == second[0] == closing[0] == 201
    assert shape(first) == shape(second)
    assert {k for k in closing[1] if k != "connection"} == set(first[1])
    assert second[1]["server"] == first[1]["server"] and second[1]["content-type"] == "application/json"
    bad = b'{"key": "k", "body": '
    for topic in ("alike", "alike-new"):  # inline, then a worker for a topic never seen
        status, _, body = exchange(node, request(topic, bad))[0]
        assert status == 400 and body["error"] == "bad_json", body
    assert shape(exchange(node, request("alike", bad))[0]) == shape(exchange(node, request("alike-new2", bad))[0])


def test_pipelined_requests_are_answered_in_order_whichever_way_each_goes(node: NodeProcess) -> None:
    exchange(node, request("piped", b'{"body": 0}'))  # make the topic known
    big = json.dumps({"body": "x" * (INLINE_MAX_BYTES + 10)}).encode()  # over the inline limit: a worker
    raw = [request("piped", json.dumps({"id": f"p{i}", "body": i}).encode()) for i in range(6)]
    raw.insert(3, request("piped", big))
    raw.insert(5, b"GET /v1/topics/piped HTTP/1.1\r\nHost: x\r\n\r\n")
    replies = exchange(node, *raw)
    assert [r[0] for r in replies] == [201, 201, 201, 201, 201, 200, 201, 201]
    published = [r[2]["id"] for r in replies if "id" in r[2]]
    assert published[:3] == ["p0", "p1", "p2"] and published[4:] == ["p3", "p4", "p5"]
    assert "end_offsets" in replies[5][2]


def test_http_1_0_is_answered_and_closed(node: NodeProcess) -> None:
    with socket.create_connection(("127.0.0.1", node.port), timeout=20) as sock:
        sock.sendall(request("piped", b'{"body": "old"}', version="1.0"))
        status, headers, body = read_replies(sock, 1)[0]
        assert status == 201 and body["topic"] == "piped"
        assert sock.recv(1) == b"", "an HTTP/1.0 request without keep-alive closes the connection"


def test_clients_that_leave_before_their_answer_lose_nothing_and_hurt_no_one(node: NodeProcess) -> None:
    exchange(node, request("leavers", b'{"body": 0}'))
    for i in range(50):
        sock = socket.create_connection(("127.0.0.1", node.port), timeout=20)
        sock.sendall(request("leavers", json.dumps({"id": f"gone{i}", "body": i}).encode()))
        sock.close()  # before the commit answers
    status, _, body = exchange(node, request("leavers", b'{"id": "stays", "body": 1}'))[0]
    assert status == 201 and body["id"] == "stays"

    def stored() -> int:
        return sum(requests.get(f"{node.url}/v1/topics/leavers", timeout=10).json()["end_offsets"].values())

    # Each request that reached the node was taken whole; none of them is stored twice.
    wait_until(lambda: stored() >= 2, timeout=20, what="the first and last messages stored")
    assert stored() <= 52
    again = exchange(node, *(request("leavers", json.dumps({"id": f"gone{i}", "body": i}).encode())
                             for i in range(50)))
    assert all(r[0] in (200, 201) for r in again)
    assert stored() == 52, "every message stored once: the ones whose client left, and no duplicates"


def test_a_large_body_still_goes_to_a_worker_and_is_stored(node: NodeProcess, tmp_path: Path) -> None:
    exchange(node, request("large", b'{"body": 0}'))
    body = json.dumps({"messages": [{"body": "y" * 1000} for _ in range(200)]}).encode()
    assert len(body) > INLINE_MAX_BYTES
    status, _, answer = exchange(node, request("large", body))[0]
    assert status == 201 and len(answer["messages"]) == 200


def anonymous_rss_kib(node: NodeProcess) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/<pid>/status")


def test_a_long_keep_alive_connection_does_not_hoard_its_answers(node: NodeProcess) -> None:
    # Answers over 8 KiB once shared one output buffer per connection, which only ever grew: each
    # keep-alive publisher held every answer it had been sent, up to 16 MiB.
    topic = "t" * 200
    exchange(node, request(topic, b'{"body": 0}'))
    answered = 0
    with socket.create_connection(("127.0.0.1", node.port), timeout=20) as sock:
        for round_ in range(500):
            if round_ == 150:  # past the warm-up: imports, caches and the allocator's first arenas
                before, answered = anonymous_rss_kib(node), 0
            batch = {"messages": [{"id": f"{round_}-{i}-" + "i" * 180, "body": i} for i in range(60)]}
            sock.sendall(request(topic, json.dumps(batch).encode()))
            status, headers, _ = read_replies(sock, 1)[0]
            assert status == 201
            answered += int(headers["content-length"])
        grown = anonymous_rss_kib(node) - before
    assert answered > 8 << 20
    assert grown < (answered >> 10) // 3, f"the node grew by {grown} KiB while sending {answered >> 10} KiB of answers"


def node_has_read(node_port: int, client: socket.socket) -> bool:
    """True once the node's end of ``client``'s connection holds no unread byte (/proc/net/tcp).

    Loopback delivers into the node's socket at once, so an empty receive queue there means the
    node's loop has read what ``client`` sent, and queued it before anything sent later.
    """
    client_port = client.getsockname()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        if (local_port, remote_port) == (node_port, client_port):
            return int(fields[4].split(":")[1], 16) == 0
    return False


@pytest.mark.parametrize("inline", ["true", "false"])
def test_the_setting_decides_whether_a_publish_needs_a_free_worker_thread(tmp_path: Path, inline: str) -> None:
    """With one worker thread held by a long poll, an inline publish is still answered (and wakes
    the long poll with its message); without inline publishes, it waits for the thread, and the
    long poll ends empty."""
    wait_ms = 6000
    with NodeProcess(tmp_path, env={"TOYMB_THREADS": "1", "TOYMB_INLINE_PUBLISH": inline}) as proc:
        exchange(proc, request("held", b'{"body": "before"}'))       # a worker creates the topic
        sid = requests.post(f"{proc.url}/v1/topics/held/groups/g/subscribers", json={"mode": "pull"},
                            timeout=10).json()["subscriber_id"]
        with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as poll:
            poll.sendall(f"GET /v1/topics/held/groups/g/messages?subscriber={sid}&wait_ms={wait_ms} HTTP/1.1\r\n"
                         "Host: x\r\n\r\n".encode())
            wait_until(lambda: node_has_read(proc.port, poll), timeout=10, what="the node to read the long poll")
            published, = exchange(proc, request("held", b'{"id": "during", "body": "d"}'))
            polled, = read_replies(poll, 1)
    assert published[0] == 201 and polled[0] == 200
    got = [m["id"] for m in polled[2]["messages"]]
    assert got == (["during"] if inline == "true" else [])


def test_publishes_arriving_together_are_all_answered_whichever_way_each_goes(node: NodeProcess) -> None:
    """Requests received in one turn of the loop are handed to the worker threads together: those
    the inline way takes, and the others (a topic never seen, a read), each get their own answer."""
    exchange(node, request("together", b'{"body": 0}'))  # make the topic known
    socks = [socket.create_connection(("127.0.0.1", node.port), timeout=20) for _ in range(24)]
    try:
        sent = []
        for n, sock in enumerate(socks):
            if n % 6 == 5:
                raw, want = b"GET /v1/topics/together HTTP/1.1\r\nHost: x\r\n\r\n", ("read", 200)
            elif n % 3 == 2:
                raw, want = request(f"together-new-{n}", b'{"body": 1}'), (f"together-new-{n}", 201)
            else:
                raw, want = request("together", json.dumps({"id": f"t{n}", "body": n}).encode()), ("together", 201)
            sent.append(want)
            sock.sendall(raw)
        for sock, (topic, status) in zip(socks, sent, strict=True):
            got, _, body = read_replies(sock, 1)[0]
            assert got == status, body
            assert ("end_offsets" in body) if topic == "read" else body["topic"] == topic
    finally:
        for sock in socks:
            sock.close()
