"""A request as the parser delivers it, its body (spooled to disk past a size), and its WSGI environ."""

from __future__ import annotations

import io
import re
import sys
import tempfile
from typing import IO, Any
from urllib.parse import unquote_to_bytes

import httptools

from .framing import Refusal

# A body over this is spooled to a temporary file rather than held in memory, so a thousand
# connections sending large bodies at once cost disk, not RAM (waitress's inbuf_overflow).
SPOOL_BYTES = 512 * 1024
# Headers a client may not set: without a trusted proxy in front, they would let any client
# claim another address or scheme (waitress's clear_untrusted_proxy_headers).
PROXY_HEADERS = frozenset({"HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_HOST", "HTTP_X_FORWARDED_PROTO",
                           "HTTP_X_FORWARDED_PORT", "HTTP_X_FORWARDED_BY", "HTTP_FORWARDED"})
# A request target made only of these (RFC 3986's path characters, no "%", "?" or "#") is its own
# path, unquoted, with no query: the usual publish URL needs neither llhttp's URL parser nor unquoting.
_PLAIN_TARGET = re.compile(rb"/[A-Za-z0-9._~!$&'()*+,;=:@/-]*")


class Request:
    """One request of a connection, from its first byte until its answer is sent."""

    __slots__ = ("body", "body_bytes", "chunked", "head_bytes", "headers", "headers_done", "keep_alive",
                 "length", "method", "spool", "started", "url", "url_parts", "version")

    def __init__(self, started: float) -> None:
        self.started = started            # time.monotonic() of the first byte: the header timeout's clock
        self.url = b""
        self.url_parts: list[bytes] = []   # as llhttp delivers them; joined once (no quadratic +=)
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.headers_done = False
        self.method = "GET"
        self.version = "1.1"
        self.keep_alive = True
        self.chunked = False
        self.length: int | None = None   # the Content-Length
        self.body: bytes | bytearray = b""   # bytes while one piece, then a bytearray (tiny chunks stay compact)
        self.body_bytes = 0
        self.spool: IO[bytes] | None = None

    def add_body(self, data: bytes, limit: int) -> None:
        """Take a piece of the body; past ``limit`` bytes the request is refused with a 413."""
        self.body_bytes += len(data)
        if self.body_bytes > limit:
            raise Refusal(413, f"the request body is over {limit} bytes (TOYMB_MAX_REQUEST)", limit="request",
                          max=limit)
        if self.spool is not None:
            self.spool.write(data)
        elif self.body_bytes > SPOOL_BYTES:
            self.spool = tempfile.TemporaryFile()
            self.spool.write(self.body)
            self.spool.write(data)
            self.body = b""
        elif not self.body:
            self.body = data
        else:
            if isinstance(self.body, bytes):
                self.body = bytearray(self.body)
            self.body += data

    def body_stream(self) -> IO[bytes]:
        """The whole body as a file (``wsgi.input``)."""
        if self.spool is not None:
            self.spool.seek(0)
            return self.spool
        return io.BytesIO(self.body)

    def close(self) -> None:
        """Drop the body (a spooled one's file is deleted)."""
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        self.body = b""

    def environ(self, base: dict[str, Any]) -> dict[str, Any]:
        """The WSGI environ of this request, as waitress builds it, on a copy of its connection's
        :func:`base_environ`.

        Raises:
            Refusal: the request target is not a URL (a 400).
        """
        target = self.url
        if _PLAIN_TARGET.fullmatch(target) is not None and target[1:2] != b"/":
            path = uri = target.decode("latin-1")
            query = ""
        else:
            try:
                parsed = httptools.parse_url(target)
            except httptools.HttpParserInvalidURLError:
                raise Refusal(400, "Bad Request: the request target is not a URL") from None
            path = unquote_to_bytes(parsed.path or b"").decode("latin-1")
            if path.startswith("//"):
                path = "/" + path.lstrip("/")
            query = (parsed.query or b"").decode("latin-1")
            uri = target.decode("latin-1")
        environ = base.copy()
        environ["REQUEST_METHOD"] = self.method
        environ["PATH_INFO"] = path
        environ["QUERY_STRING"] = query
        environ["REQUEST_URI"] = uri
        environ["SERVER_PROTOCOL"] = "HTTP/1.1" if self.version == "1.1" else f"HTTP/{self.version}"
        environ["wsgi.input"] = self.body_stream()
        for name, value in self.headers:
            key = _HEADER_KEYS.get(name)
            if key is None:
                key = _remember_header_key(name)
            if not key:
                continue
            text = value.strip(b" \t").decode("latin-1")
            environ[key] = f"{environ[key]}, {text}" if key in environ else text
        if self.chunked:
            environ.pop("HTTP_TRANSFER_ENCODING", None)  # the body is whole now, its length known
            environ["CONTENT_LENGTH"] = str(self.body_bytes)
        return environ


def base_environ(peer: tuple[str, int], server_name: str, server_port: str, ident: str) -> dict[str, Any]:
    """What the WSGI environ of every request of a connection holds alike (:meth:`Request.environ` copies it)."""
    return {
        "SCRIPT_NAME": "",
        "SERVER_NAME": server_name,
        "SERVER_PORT": server_port,
        "SERVER_SOFTWARE": ident,
        "REMOTE_ADDR": peer[0],
        "REMOTE_HOST": peer[0],
        "REMOTE_PORT": str(peer[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }


# A header's environ key, by its name as sent ("": the header is dropped). Clients send the same
# few names again and again; past HEADER_KEYS_MAX names (a client inventing names) none is added,
# nor a name longer than HEADER_KEY_BYTES: at most about 64 KiB, whatever clients send.
HEADER_KEYS_MAX = 1024
HEADER_KEY_BYTES = 64
_HEADER_KEYS: dict[bytes, str] = {}


def header_key(name: bytes) -> str:
    """The environ key of a header named ``name``, or "" when the header is dropped."""
    if b"_" in name:
        return ""  # X_Auth must not pass for X-Auth (waitress drops them too)
    key = name.decode("latin-1").upper().replace("-", "_")
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        return key
    key = "HTTP_" + key
    return "" if key in PROXY_HEADERS else key


def _remember_header_key(name: bytes) -> str:
    key = header_key(name)
    if len(name) <= HEADER_KEY_BYTES and len(_HEADER_KEYS) < HEADER_KEYS_MAX:
        _HEADER_KEYS[name] = key
    return key
