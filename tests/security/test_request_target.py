"""A request's target gives the app the same path and query whichever way the server reads it.

A plain target (path characters only) is taken as its own path without llhttp's URL parser; every
other target (escapes, a query, a fragment, a leading ``//``, an absolute URL) is parsed and unquoted.
Both must give what the parser gives, or a route, a topic name or an authorization rule would see
another path than the one the client sent.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import httptools
import pytest

from broker.aserver.framing import Refusal, read_framing
from broker.aserver.request import Request, base_environ

TARGETS = [
    b"/v1/topics/orders/messages", b"/", b"/health", b"/v1/topics/a.b~c_d-e/messages",
    b"/v1/topics/x/messages;v=1", b"/a:b@c!$&'()*+,=/d", b"/v1/topics/%6Frders/messages",
    b"/v1/topics/orders/messages?wait=1", b"/v1/topics/orders/messages?", b"/page#frag",
    b"//v1/topics/orders/messages", b"///x", b"/v1//topics", b"http://example.com/v1/topics/t/messages?a=b",
    b"/v1/topics/%2F/messages", b"/%00", b"/v1/topics/caf\xc3\xa9/messages",
]


def _environ(target: bytes) -> dict[str, object]:
    request = Request(0.0)
    request.method, request.url = "POST", target
    return request.environ(base_environ(("127.0.0.1", 5000), "localhost", "8080", "toymb"))


def _parsed(target: bytes) -> tuple[str, str]:
    """The path and query as the URL parser and unquoting give them (the rule before any shortcut)."""
    parsed = httptools.parse_url(target)
    path = unquote_to_bytes(parsed.path or b"").decode("latin-1")
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    return path, (parsed.query or b"").decode("latin-1")


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_gives_the_parsers_path_and_query(target: bytes) -> None:
    try:
        expected = _parsed(target)
    except httptools.HttpParserInvalidURLError:   # raw non-ASCII bytes: refused either way
        with pytest.raises(Refusal):
            _environ(target)
        return
    environ = _environ(target)
    assert (environ["PATH_INFO"], environ["QUERY_STRING"]) == expected
    assert environ["REQUEST_URI"] == target.decode("latin-1")


def test_a_target_that_is_not_a_url_is_still_refused() -> None:
    with pytest.raises(Refusal) as refused:
        _environ(b"not a url")
    assert refused.value.status == 400


@pytest.mark.parametrize("name", [b"Content-Length", b"content-length", b"CONTENT-LENGTH", b"cOnTeNt-LeNgTh"])
def test_the_length_header_is_read_in_any_case(name: bytes) -> None:
    assert read_framing([(b"Host", b"x"), (name, b" 12 ")], "1.1").length == 12


def test_headers_of_the_same_length_as_a_framing_header_are_not_taken_for_it() -> None:
    framing = read_framing([(b"Content-Lengtx", b"5"), (b"Transfer-Encodinx", b"gzip"), (b"Expecx", b"100-continue")],
                           "1.1")
    assert framing == (None, None, False, False)
    both = read_framing([(b"TRANSFER-ENCODING", b"chunked"), (b"Content-length", b"3")], "1.1")
    assert both.problem == "a request may not have both Transfer-Encoding and Content-Length"
    assert read_framing([(b"EXPECT", b"100-Continue")], "1.1").expect_continue
