"""How a node answers an error over HTTP: the one mapping from exceptions to status, body and headers.

Flask's error handler (:func:`broker.app.register_error_handlers`) and the publish fast path
(:mod:`broker.api.fast_publish`) both answer through :func:`error_answer`, so an error looks the
same whichever way its request came in.
"""

from __future__ import annotations

import logging
from typing import Any

from werkzeug.exceptions import HTTPException

from ..errors import BrokerError
from ..store.errors import STORE_REFUSED_VALUE, STORE_UNAVAILABLE

log = logging.getLogger("broker.app")

# A client retries a 503 after this many seconds (the store or an owner is away for now).
RETRY_AFTER_S = "1"
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}

Answer = tuple[int, dict[str, Any], dict[str, str]]


def _answer(status: int, code: str, message: str, **extra: Any) -> Answer:
    headers = {"Retry-After": RETRY_AFTER_S} if status == 503 else {}
    return status, {"error": code, "message": message, **extra}, headers


def error_answer(exc: BaseException, max_request: int) -> Answer:
    """The status, JSON body and extra headers of the answer to ``exc``; ``max_request`` names the 413 limit."""
    if isinstance(exc, BrokerError):
        if exc.status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        status, _, headers = _answer(exc.status, exc.code, exc.message)
        return status, exc.to_json(), headers
    if isinstance(exc, STORE_UNAVAILABLE):
        first_line = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        log.warning("store unavailable: %s", first_line)
        return _answer(503, "unavailable", f"the store cannot be reached now ({type(exc).__name__})")
    if isinstance(exc, STORE_REFUSED_VALUE):
        return _answer(400, "bad_value", "the store refused a value of this request")
    if isinstance(exc, HTTPException):
        status = exc.code or 500
        if status == 413:
            return _answer(413, "payload_too_large",
                           f"the request body is over {max_request} bytes (TOYMB_MAX_REQUEST)",
                           limit="request", max=max_request)
        code = _HTTP_CODES.get(status, (exc.name or "error").lower().replace(" ", "_"))
        if status == 404:
            return _answer(404, code, "no such endpoint: the API is described at /openapi.json",
                           api="/openapi.json")
        if status == 405:
            allowed = ", ".join(sorted(getattr(exc, "valid_methods", None) or ()))
            status, body, _ = _answer(405, code, f"this endpoint takes {allowed or 'no method'}")
            return status, body, {"Allow": allowed} if allowed else {}
        return _answer(status, code, exc.description or exc.name)
    log.error("unhandled error", exc_info=exc)
    return _answer(500, "internal_error", f"unexpected {type(exc).__name__}; see the node's log")
