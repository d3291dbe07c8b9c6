"""The push-URL allowlist: decisions, and a real node that never contacts a refused URL."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from broker.errors import BadRequest, ConfigError, Forbidden
from broker.security.allowlist import PushAllowlist, build
from tests.support import NodeProcess, wait_until

from .conftest import ADM, bearer


def fixed(*addresses: str):  # type: ignore[no-untyped-def]
    """A resolver answering ``addresses`` for any name: DNS answers we cannot get from real DNS."""
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/hook",
        "https://127.0.0.1/x",
        "http://[::1]:9000/",
        "http://localhost:1/",
        "http://10.20.30.40/x",
        "http://hooks.example.com/x",
        "http://a.b.hooks.example.com:81/",
    ],
)
def test_allowed(url: str) -> None:
    allow = PushAllowlist(
        ["127.0.0.0/8", "::1", "10.0.0.0/8", "localhost", "*.example.com"], resolver=fixed("10.1.1.1")
    )
    allow(url)


@pytest.mark.parametrize(
    "url, error, says",
    [
        ("ftp://127.0.0.1/x", BadRequest, "http:// or https://"),
        ("file:///etc/passwd", BadRequest, "http:// or https://"),
        ("gopher://127.0.0.1:70/", BadRequest, "http:// or https://"),
        ("http:///nohost", BadRequest, "no host"),
        ("http://user:pw@127.0.0.1/", BadRequest, "credentials"),
        ("http://127.0.0.1:99999/", BadRequest, "malformed"),
        ("not a url", BadRequest, "http:// or https://"),
        ("http://192.168.1.1/", Forbidden, "push_allow"),
        ("http://169.254.169.254/latest/meta-data/", Forbidden, "push_allow"),
        ("http://[fe80::1]/", Forbidden, "push_allow"),
        ("http://[::ffff:169.254.169.254]/", Forbidden, "push_allow"),
        ("http://0x7f000001/", Forbidden, "push_allow"),  # resolves to 127.0.0.1, not allowed here
    ],
)
def test_refused(url: str, error: type[Exception], says: str) -> None:
    allow = PushAllowlist(["10.0.0.0/8"])
    with pytest.raises(error) as caught:
        allow(url)
    assert says in caught.value.message  # type: ignore[attr-defined]
    if error is Forbidden:
        assert caught.value.to_json()["limit"] == "push_allow"  # type: ignore[attr-defined]


def test_metadata_needs_an_explicit_link_local_entry() -> None:
    with pytest.raises(Forbidden):
        PushAllowlist(["0.0.0.0/0"])("http://169.254.169.254/")
    with pytest.raises(Forbidden):  # a name pattern does not open it either
        PushAllowlist(["*"], resolver=fixed("169.254.169.254"))("http://metadata.internal/")
    PushAllowlist(["169.254.169.254/32"])("http://169.254.169.254/")
    PushAllowlist(["169.254.0.0/16"])("http://169.254.1.2/")


def test_every_resolved_address_must_be_allowed() -> None:
    allow = PushAllowlist(["10.0.0.0/8"], resolver=fixed("10.0.0.5", "192.168.0.5"))
    with pytest.raises(Forbidden, match="192.168.0.5"):
        allow("http://dual.example/")
    PushAllowlist(["10.0.0.0/8"], resolver=fixed("10.0.0.5", "10.0.0.6"))("http://dual.example/")


def test_host_patterns_match_names_not_addresses() -> None:
    allow = PushAllowlist(["*.hooks.test"], resolver=fixed("10.0.0.5"))
    allow("http://a.hooks.test/")
    allow("http://A.HOOKS.TEST/")  # host names are case-insensitive
    with pytest.raises(Forbidden):
        allow("http://hooks.test.evil/")
    with pytest.raises(Forbidden):
        allow("http://10.0.0.5/")


def test_unresolvable_hosts_are_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="does not resolve"):
        PushAllowlist(["*"])("http://no-such-host.invalid/")


def test_real_resolution_of_localhost() -> None:
    PushAllowlist(["127.0.0.0/8", "::1"])("http://localhost:8080/")
    with pytest.raises(Forbidden):
        PushAllowlist(["10.0.0.0/8"])("http://localhost:8080/")


def test_bad_entries_are_a_config_error() -> None:
    with pytest.raises(ConfigError):
        PushAllowlist(["10.0.0.0/33"])
    with pytest.raises(ConfigError):
        PushAllowlist(["host name"])


def test_the_empty_default() -> None:
    build((), loopback_only=True)("http://127.0.0.1:5/")
    with pytest.raises(Forbidden):
        build((), loopback_only=False)("http://127.0.0.1:5/")
    with pytest.raises(Forbidden):
        build((), loopback_only=True)("http://10.0.0.1:5/")


# -- a real node: refused at registration, and never contacted ---------------------------------


class Listener:
    """A loopback HTTP server recording every connection and request it gets."""

    def __init__(self, host: str = "127.0.0.1", status: int = 200, location: str | None = None,
                 port: int = 0) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append(self.rfile.read(length))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listeners() -> Iterator[list[Listener]]:
    made: list[Listener] = []
    yield made
    for listener in made:
        listener.close()


@pytest.mark.slow
def test_a_refused_push_url_is_never_contacted(tmp_path: Path, listeners: list[Listener]) -> None:
    forbidden = Listener("127.0.0.2")  # loopback, but outside the allowlist below
    listeners.append(forbidden)
    # The allowed receiver answers with a redirect to the forbidden one: it must not be followed.
    allowed = Listener(status=307, location=forbidden.url + "/stolen")
    listeners.append(allowed)
    env = {
        "TOYMB_TOKENS": f"{ADM}=admin",
        "TOYMB_PUSH_ALLOW": "127.0.0.1/32,10.0.0.0/8",
        "TOYMB_PUSH_BACKOFF_MS": "50",
        "TOYMB_PUSH_MAX_ATTEMPTS": "2",
    }
    with NodeProcess(tmp_path, env=env) as node:
        h = bearer(ADM)
        base = f"{node.url}/v1/topics/leak"
        refused = requests.post(
            f"{base}/groups/spy/subscribers",
            json={"mode": "push", "url": forbidden.url + "/x"},
            headers=h,
            timeout=10,
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["limit"] == "push_allow"
        compat = requests.post(
            f"{node.url}/subscribe",
            json={
                "topicName": "leak",
                "groupName": "spy2",
                "type": "push",
                "ip": "127.0.0.2",
                "port": forbidden.port,
            },
            headers=h,
            timeout=10,
        )
        assert compat.status_code == 403, compat.text
        ok = requests.post(
            f"{base}/groups/fine/subscribers",
            json={"mode": "push", "url": allowed.url + "/in", "start": "earliest"},
            headers=h,
            timeout=10,
        )
        assert ok.status_code == 201, ok.text
        for n in range(5):
            assert (
                requests.post(
                    f"{base}/messages", json={"body": {"secret": n}}, headers=h, timeout=10
                ).status_code
                == 201
            )
        # The allowed receiver is pushed to (so pushes happen at all) ...
        wait_until(lambda: len(allowed.requests) >= 2, timeout=30, what="pushes to the allowed receiver")
        time.sleep(1.0)  # ... and retries of its redirect answer have had time to happen
    assert forbidden.connections == 0 and forbidden.requests == []


def test_forbidden_listener_is_reachable_when_allowed(listeners: list[Listener]) -> None:
    """Control for the test above: the 127.0.0.2 address really reaches the listener."""
    listener = Listener("127.0.0.2")
    listeners.append(listener)
    with socket.create_connection(("127.0.0.2", listener.port), timeout=5):
        pass
    wait_until(lambda: listener.connections == 1, timeout=5, what="connection")
