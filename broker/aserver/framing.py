"""What the node's HTTP server answers by itself: framing rules, JSON errors, response heads.

The app never sees a request these refuse; their answers have the same JSON shape as the app's
errors (``broker.errors.BrokerError.to_json``) and always close the connection, since the byte
stream may be out of step with the framing after them.
"""

from __future__ import annotations

import json
import time
from email.utils import formatdate
from typing import Any, NamedTuple

# A Content-Length longer than this is refused before it is converted to an int: no body the
# node accepts needs more digits, and int() of a few thousand digits is a CPU cost a client chooses.
MAX_LENGTH_DIGITS = 18
# The request line and headers together may have at most this many bytes (waitress's default).
MAX_HEADER_BYTES = 256 * 1024
# And at most this many header lines: within 256 KiB, 50,000 tiny headers would cost a few MB each.
MAX_HEADERS = 1000

_REASONS = {400: "Bad Request", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}
_CODES = {400: "bad_request", 413: "payload_too_large", 431: "request_header_fields_too_large",
          500: "internal_error", 503: "unavailable"}

_date_second = -1
_date_value = b""


def http_date() -> bytes:
    """The ``Date`` header's value, formatted once a second (every answer carries one)."""
    global _date_second, _date_value
    now = int(time.time())
    if now != _date_second:
        _date_value = formatdate(now, usegmt=True).encode("ascii")
        _date_second = now
    return _date_value


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """The JSON body of an error, the same shape as the app's (``broker.errors.BrokerError.to_json``)."""
    return json.dumps({"error": code, "message": message, **extra}).encode()


class Refusal(Exception):
    """A request the server answers itself with a JSON error, then closes the connection."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra

    def answer(self, ident: str, *, retry_after: bool = False) -> bytes:
        """The whole HTTP answer: status line, headers with ``Connection: close``, JSON body."""
        body = error_body(_CODES.get(self.status, "error"), self.message, **self.extra)
        head = (f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                + ("Retry-After: 1\r\n" if retry_after else "")
                + f"Connection: close\r\nServer: {ident}\r\n").encode("latin-1")
        return head + b"Date: " + http_date() + b"\r\n\r\n" + body


def server_fault() -> Refusal:
    """The answer to a request whose handler failed: a JSON 500 that closes the connection."""
    return Refusal(500, "the server could not answer this request; see the node's log")


def too_large(limit: int) -> Refusal:
    """The 413 of a body over the request limit, named as the app names it."""
    return Refusal(413, f"the request body is over {limit} bytes (TOYMB_MAX_REQUEST)", limit="request", max=limit)


class Framing(NamedTuple):
    """How a request's body is framed, read from its headers in one pass."""

    problem: str | None      # why the framing is refused (a 400), or None
    length: int | None       # the Content-Length, if any
    chunked: bool
    expect_continue: bool


def read_framing(headers: list[tuple[bytes, bytes]], version: str) -> Framing:
    """The request's framing, refusing what is ambiguous.

    A proxy in front may read ``Transfer-Encoding`` and ``Content-Length`` the other way from
    this server, and the rest of the body becomes a second, smuggled request. So the length must
    have exactly one source: one ``Content-Length`` of digits, or one ``Transfer-Encoding`` that is
    exactly ``chunked``, on HTTP/1.1.
    """
    lengths: list[bytes] = []
    encodings: list[bytes] = []
    expect = False
    for name, value in headers:
        # By length first: most headers are none of the three, and are not lowered for nothing.
        size = len(name)
        if size == 14 and name.lower() == b"content-length":
            lengths.append(value.strip(b" \t"))
        elif size == 17 and name.lower() == b"transfer-encoding":
            encodings.append(value.strip(b" \t"))
        elif size == 6 and name.lower() == b"expect":
            expect = value.strip(b" \t").lower() == b"100-continue" and version == "1.1"
    problem = None
    if lengths and encodings:
        problem = "a request may not have both Transfer-Encoding and Content-Length"
    elif len(lengths) > 1:
        problem = "a request may have only one Content-Length"
    elif lengths and len(lengths[0]) > MAX_LENGTH_DIGITS:
        problem = f"Content-Length has more than {MAX_LENGTH_DIGITS} digits"
    elif lengths and not lengths[0].isdigit():
        problem = "Content-Length must be digits"
    elif encodings and (len(encodings) > 1 or encodings[0].lower() != b"chunked"):
        problem = "Transfer-Encoding must be exactly chunked"
    elif encodings and version != "1.1":
        problem = "Transfer-Encoding needs HTTP/1.1"
    if problem is not None:
        return Framing(problem, None, False, False)
    return Framing(None, int(lengths[0]) if lengths else None, bool(encodings), expect)


def response_head(version: str, status: str, headers: list[tuple[str, str]], ident: str,
                  connection: str | None) -> bytes:
    """The status line and headers of an answer, with the server's ``Server`` and ``Date``."""
    head = f"HTTP/{version} {status}\r\n" + "".join([f"{name}: {value}\r\n" for name, value in headers])
    if connection is not None:
        head += f"Connection: {connection}\r\n"
    return (head + f"Server: {ident}\r\nDate: ").encode("latin-1") + http_date() + b"\r\n\r\n"
