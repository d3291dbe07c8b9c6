"""The broker's exception tree, each class carrying the HTTP status it maps to at the edge.

    BrokerError                     500 (never raised on purpose for client input)
    ├── BadRequest                  400  malformed JSON, wrong types, bad names
    │   └── LimitExceeded           400  a configured limit (headers, batch, wait) was passed
    ├── Unauthorized                401
    ├── Forbidden                   403
    ├── NotFound                    404
    ├── Conflict                    409
    ├── PayloadTooLarge             413
    ├── Unprocessable               422  e.g. an enricher rejected the message
    ├── NotOwner                    503  this node disagrees about a topic's owner (retryable)
    ├── Unavailable                 503  the store or the owner cannot be reached now
    └── ConfigError                 startup only: a bad setting
"""

from __future__ import annotations

from typing import Any


class BrokerError(Exception):
    """Root of every error the broker raises on purpose."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.details}


class BadRequest(BrokerError):
    status = 400
    code = "bad_request"


class LimitExceeded(BadRequest):
    code = "limit_exceeded"


class Unauthorized(BrokerError):
    status = 401
    code = "unauthorized"


class Forbidden(BrokerError):
    status = 403
    code = "forbidden"


class NotFound(BrokerError):
    status = 404
    code = "not_found"


class Conflict(BrokerError):
    status = 409
    code = "conflict"


class PayloadTooLarge(BrokerError):
    status = 413
    code = "payload_too_large"


class Unprocessable(BrokerError):
    status = 422
    code = "unprocessable"


class Unavailable(BrokerError):
    status = 503
    code = "unavailable"


class NotOwner(Unavailable):
    code = "not_owner"


class ConfigError(BrokerError):
    """A setting is unknown or has a bad value; raised before the node serves anything."""

    code = "config_error"
