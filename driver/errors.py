"""The driver's exception tree. Every error a driver call raises on purpose is a ``ToyMBError``.

    ToyMBError                      .response / .status_code (None when no node answered)
    ├── ConfigurationError          (also ValueError) a bad name, handler or setting, found before any call
    ├── SerializationError          (also TypeError) a message body that cannot travel as JSON
    ├── TransportError              no node gave an HTTP answer; .errors holds one line per URL tried
    │   ├── ConnectError            every node refused or was unreachable
    │   └── RequestTimeout          the last node tried did not answer in time
    └── HTTPStatusError             a node answered 4xx/5xx; .code and .message from its JSON body
        ├── BadRequest              400 (including a passed limit)
        ├── AuthenticationError     401 missing or unknown token
        ├── PermissionDenied        403 .role and .topic name what was refused
        ├── NotFound                404
        ├── Conflict                409
        ├── PayloadTooLarge         413
        ├── Unprocessable           422 e.g. an enricher rejected the message
        └── Unavailable             503 from every node tried
"""

from __future__ import annotations

from typing import Any

import requests


class ToyMBError(Exception):
    """Root of every error the driver raises on purpose."""

    def __init__(self, message: str, *, response: requests.Response | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The HTTP answer that caused this error, when there was one.
        self.response = response

    @property
    def status_code(self) -> int | None:
        """The HTTP status of :attr:`response`, or None when no node answered."""
        return None if self.response is None else self.response.status_code


class ConfigurationError(ToyMBError, ValueError):
    """A topic, group, handler or setting is invalid; raised at decoration or construction time."""


class SerializationError(ToyMBError, TypeError):
    """A message body is neither bytes, str nor JSON-serialisable."""


class TransportError(ToyMBError):
    """No node produced an HTTP answer."""

    def __init__(self, message: str, *, errors: list[str] | None = None) -> None:
        super().__init__(message)
        #: One line per attempt: which URL and what went wrong.
        self.errors = list(errors or [])


class ConnectError(TransportError):
    """Every node tried refused the connection or could not be reached."""


class RequestTimeout(TransportError):
    """The last node tried accepted the request but did not answer within the timeout."""


class HTTPStatusError(ToyMBError):
    """A node answered with an error status. ``code`` and ``message`` come from its JSON body."""

    def __init__(self, message: str, *, response: requests.Response, code: str = "",
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message, response=response)
        #: The broker's machine-readable ``error`` code, e.g. ``"bad_topic_name"``.
        self.code = code
        #: Every other member of the error body (``limit``, ``max``, ``field``...).
        self.details = dict(details or {})


class BadRequest(HTTPStatusError):
    """400: the request was malformed or passed a limit."""


class AuthenticationError(HTTPStatusError):
    """401: the token is missing or unknown (set ``Template(token=...)`` or ``TOYMB_TOKEN``)."""


class PermissionDenied(HTTPStatusError):
    """403: the token is valid but lacks a role for this topic."""

    @property
    def role(self) -> str | None:
        """The role the call needed, when the broker said."""
        value = self.details.get("role")
        return value if isinstance(value, str) else None

    @property
    def topic(self) -> str | None:
        """The topic the call was refused on, when the broker said."""
        value = self.details.get("topic")
        return value if isinstance(value, str) else None


class NotFound(HTTPStatusError):
    """404: no such topic, group or subscriber."""


class Conflict(HTTPStatusError):
    """409: the request conflicts with the broker's state."""


class PayloadTooLarge(HTTPStatusError):
    """413: the body is over the broker's limit."""


class Unprocessable(HTTPStatusError):
    """422: the broker understood the request but refused it, e.g. an enricher failed."""


class Unavailable(HTTPStatusError):
    """503: the node (and every other node tried) could not serve the call now."""


_BY_STATUS: dict[int, type[HTTPStatusError]] = {
    400: BadRequest, 401: AuthenticationError, 403: PermissionDenied, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 422: Unprocessable, 503: Unavailable,
}


def from_response(response: requests.Response) -> HTTPStatusError:
    """The exception for an error answer, with the broker's ``{"error", "message", ...}`` parsed."""
    try:
        body = response.json()
    except ValueError:
        body = None
    details: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
    code = str(details.pop("error", "") or "")
    text = details.pop("message", None)
    if not isinstance(text, str) or not text:
        text = response.text.strip()[:200] or response.reason or "error"
    cls = _BY_STATUS.get(response.status_code, HTTPStatusError)
    message = f"{response.status_code} from {response.request.method} {response.url}: {text}"
    if cls is PermissionDenied:
        refused = [f"{k} {details[k]!r}" for k in ("role", "topic") if isinstance(details.get(k), str)]
        if refused:
            message += f" (refused: {', '.join(refused)})"
    return cls(message, response=response, code=code, details=details)
