"""The push HTTP client: one POST per call, under one total deadline, to a vetted address.

Two rules a general HTTP client does not keep, which is why this is not ``requests``:

- **A total deadline.** A receiver that answers one byte every few seconds never trips a
  per-read timeout; here every send and receive gets only what is left of ``push_timeout_ms``,
  so a push holds its worker for at most that long, however the receiver behaves.
- **The allowlist at connect time.** The URL's host is resolved here, every address is checked
  against the node's current allowlist, and the socket connects to a checked address. A name
  that resolved to an allowed address at registration and to a forbidden one now (DNS
  rebinding), or a node restarted with a narrower allowlist, gets no push.

Connections are kept alive and reused per (scheme, host, port); each was vetted when it was
opened. Answers are read only as far as the status (and a small body, to reuse the connection).
"""

from __future__ import annotations

import functools
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from ..errors import BrokerError

# The addresses a URL may be connected to, or a BrokerError saying why it may not.
Vetter = Callable[[str], list[str]]

_MAX_HEAD = 64 * 1024        # status line and headers of an answer
_MAX_BODY = 64 * 1024        # a larger answer body is not read: the connection is dropped instead
_IDLE_S = 30.0               # an idle kept-alive connection older than this is closed
_MAX_IDLE_PER_KEY = 4
_PATH_SAFE = "/%:@!$&'()*+,;=-._~?"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str
    # The receiver could not be reached at all: a fault of the subscriber, not of the message.
    unreachable: bool = False
    # The receiver's HTTP status, when it answered.
    status: int | None = None


class _Expired(Exception):
    """The push's deadline passed."""


class _Protocol(Exception):
    """The receiver's answer is not HTTP/1.x."""


@dataclass
class _Conn:
    sock: socket.socket
    key: tuple[str, str, int]
    idle_since: float = 0.0


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Expired
    return left


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The one client TLS context, made at the first https push: loading the CA store costs 50 ms."""
    return ssl.create_default_context()


class Pusher:
    """POSTs push bodies to receivers; never follows redirects, never uses a proxy."""

    def __init__(self, timeout_ms: int, vet: Vetter) -> None:
        self.timeout = timeout_ms / 1000.0
        self.vet = vet
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: dict[str, str] | None = None) -> Outcome:
        """POST ``body`` to ``url``; the outcome says whether the receiver took it.

        ``headers`` (ASCII values, no line breaks: the caller encodes them) are sent too; their
        ``Content-Type`` replaces the default ``application/json``.
        """
        deadline = time.monotonic() + self.timeout
        key, target, netloc = _parse(url)
        extra = dict(headers or {})
        content_type = extra.pop("Content-Type", "application/json")
        lines = "".join(f"{name}: {_no_breaks(value)}\r\n" for name, value in extra.items())
        head = (f"POST {target} HTTP/1.1\r\nHost: {netloc}\r\nContent-Type: {_no_breaks(content_type)}\r\n"
                f"Content-Length: {len(body)}\r\nUser-Agent: toymb-push\r\n{lines}\r\n").encode("ascii", "replace")
        conn = self._checkout(key)
        if conn is not None:
            try:
                return self._exchange(conn, head + body, deadline)
            except (OSError, _Protocol):
                pass  # a kept-alive connection the receiver had closed: open a fresh one
            except _Expired:
                return Outcome(False, f"timeout after {self.timeout:g}s")
        try:
            conn = self._connect(key, deadline)
        except BrokerError as exc:
            return Outcome(False, f"refused: {exc.message}", unreachable=True)
        except _Expired:
            return Outcome(False, f"unreachable: connect timeout after {self.timeout:g}s", unreachable=True)
        except OSError as exc:
            return Outcome(False, f"unreachable: {type(exc).__name__}", unreachable=True)
        try:
            return self._exchange(conn, head + body, deadline)
        except _Expired:
            return Outcome(False, f"timeout after {self.timeout:g}s")
        except (OSError, _Protocol) as exc:
            return Outcome(False, f"request failed: {type(exc).__name__}")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.sock.close()

    # -- connections --------------------------------------------------------------------------

    def _connect(self, key: tuple[str, str, int], deadline: float) -> _Conn:
        scheme, host, port = key
        addresses = self.vet(f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}/")
        error: OSError = OSError(f"no address for {host}")
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(_remaining(deadline))
                sock.connect((address, port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if scheme == "https":
                    sock.settimeout(_remaining(deadline))
                    sock = _tls_context().wrap_socket(sock, server_hostname=host)
                return _Conn(sock, key)
            except TimeoutError:
                sock.close()
                raise _Expired from None
            except OSError as exc:
                sock.close()
                error = exc
        raise error

    def _checkout(self, key: tuple[str, str, int]) -> _Conn | None:
        now = time.monotonic()
        with self._lock:
            conns = self._idle.get(key, [])
            while conns:
                conn = conns.pop()
                if now - conn.idle_since < _IDLE_S and not _readable(conn.sock):
                    return conn
                conn.sock.close()  # too old, or closed by the receiver (readable means EOF or junk)
        return None

    def _checkin(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            conns = self._idle.setdefault(conn.key, [])
            if len(conns) < _MAX_IDLE_PER_KEY:
                conns.append(conn)
                return
        conn.sock.close()

    # -- one exchange -------------------------------------------------------------------------

    def _exchange(self, conn: _Conn, request: bytes, deadline: float) -> Outcome:
        sock = conn.sock
        reusable = False
        try:
            view = memoryview(request)
            while view:
                sock.settimeout(_remaining(deadline))
                view = view[sock.send(view):]
            buffered = b""
            while True:  # skip any 1xx interim answers
                status, headers, buffered = _read_head(sock, buffered, deadline)
                if status >= 200:
                    break
            reusable = _read_body(sock, headers, buffered, deadline)
        except TimeoutError:
            raise _Expired from None
        except _Expired:
            raise
        finally:
            if reusable:
                self._checkin(conn)
            else:
                sock.close()
        if 200 <= status < 300:
            return Outcome(True, f"http {status}", status=status)
        return Outcome(False, f"http {status}", status=status)


@functools.lru_cache(maxsize=1024)
def _parse(url: str) -> tuple[tuple[str, str, int], str, str]:
    """A push URL's connection key (scheme, host, port), request target and Host header, worked
    out once per URL: every push to a subscriber goes to the same one."""
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    target = quote(parts.path or "/", safe=_PATH_SAFE) + (f"?{quote(parts.query, safe=_PATH_SAFE)}"
                                                          if parts.query else "")
    return (scheme, host.lower(), port), target, parts.netloc


def _no_breaks(value: str) -> str:
    """A header value that cannot end its line early (no header injection)."""
    return value.replace("\r", " ").replace("\n", " ")


def _readable(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def _recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(_remaining(deadline))
    data = sock.recv(65536)
    if not data:
        raise ConnectionResetError("the receiver closed the connection")
    return data


def _read_head(sock: socket.socket, buffered: bytes, deadline: float) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, bytes read past the head)."""
    while b"\r\n\r\n" not in buffered:
        if len(buffered) > _MAX_HEAD:
            raise _Protocol("answer head too large")
        buffered += _recv(sock, deadline)
    head, rest = buffered.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isascii() and parts[1].isdigit()):
        raise _Protocol("not an HTTP/1.x answer")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return int(parts[1]), headers, rest


def _read_body(sock: socket.socket, headers: dict[str, str], buffered: bytes, deadline: float) -> bool:
    """Read a small, framed answer body; True when the connection can carry another push."""
    if "close" in headers.get("connection", "").lower() or "transfer-encoding" in headers:
        return False
    length_text = headers.get("content-length", "")
    if not (length_text.isascii() and length_text.isdigit()) or int(length_text) > _MAX_BODY:
        return False
    length = int(length_text)
    try:
        while len(buffered) < length:
            buffered += _recv(sock, deadline)
    except (_Expired, TimeoutError, OSError):
        return False  # the status is in; a slow or broken body only costs the connection
    return len(buffered) == length
