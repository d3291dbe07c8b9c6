"""The server remembers each header name's environ key; a client inventing names cannot grow that memory."""

from __future__ import annotations

from broker.aserver import request as request_module
from broker.aserver.request import HEADER_KEY_BYTES, HEADER_KEYS_MAX, Request, base_environ


def _environ(headers: list[tuple[bytes, bytes]]) -> dict[str, object]:
    req = Request(0.0)
    req.method, req.url, req.headers = "POST", b"/v1/topics/t/messages", headers
    return req.environ(base_environ(("127.0.0.1", 5000), "localhost", "8080", "toymb"))


def test_invented_header_names_are_not_remembered_past_the_cap_and_still_reach_the_app() -> None:
    for i in range(HEADER_KEYS_MAX + 500):
        environ = _environ([(f"X-Made-Up-{i}".encode(), b"v")])
        assert environ[f"HTTP_X_MADE_UP_{i}"] == "v"
    long_name = b"X-" + b"L" * HEADER_KEY_BYTES
    assert _environ([(long_name, b"w")])["HTTP_" + long_name.decode().upper().replace("-", "_")] == "w"
    assert len(request_module._HEADER_KEYS) <= HEADER_KEYS_MAX
    assert long_name not in request_module._HEADER_KEYS
    # Past the cap, the rules are the same: content headers keep their names, names with an
    # underscore and proxies' forwarding headers are dropped, repeated names are joined.
    environ = _environ([(b"Content-Type", b"application/json"), (b"X_Auth", b"forged"),
                        (b"X-Forwarded-For", b"10.9.9.9"), (b"X-Never-Seen", b"a"), (b"x-never-seen", b"b")])
    assert environ["CONTENT_TYPE"] == "application/json"
    assert "HTTP_X_AUTH" not in environ and "HTTP_X_FORWARDED_FOR" not in environ
    assert environ["HTTP_X_NEVER_SEEN"] == "a, b"


def test_each_request_gets_its_own_environ_from_the_connections_base() -> None:
    base = base_environ(("10.0.0.1", 4000), "localhost", "8080", "toymb")
    first, second = Request(0.0), Request(0.0)
    first.url = second.url = b"/health"
    first.headers = [(b"X-One", b"1")]
    one, two = first.environ(base), second.environ(base)
    assert one["HTTP_X_ONE"] == "1" and "HTTP_X_ONE" not in two and "HTTP_X_ONE" not in base
    assert one["wsgi.input"] is not two["wsgi.input"] and two["REMOTE_ADDR"] == "10.0.0.1"
