"""HTTP blueprints of a node; each module owns one resource."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, cast

from flask import current_app, request

from ..errors import BadRequest

if TYPE_CHECKING:
    from ..node import Node


def node() -> Node:
    """The :class:`broker.node.Node` of the current app."""
    return cast("Node", current_app.extensions["toymb"])


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_unicode(value: Any) -> None:
    """Refuse lone surrogates (valid JSON escapes, but not text UTF-8 or the store can hold)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        raise BadRequest("the body holds an unpaired UTF-16 surrogate escape", code="bad_json") from None


def json_body(*, required: bool = True) -> Any:
    """The request's JSON body, or BadRequest naming what is wrong with it."""
    raw = request.get_data(cache=True)
    if not raw:
        if required:
            raise BadRequest("the request needs a JSON body", code="bad_json")
        return None
    try:
        # NaN, Infinity and overflowing numbers would be stored and rendered as invalid JSON.
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8", code="bad_json") from None
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="bad_json") from None
    except RecursionError:
        raise BadRequest("the body is nested too deeply", code="bad_json") from None
    if _SURROGATE_ESCAPE.search(raw):
        _check_unicode(value)
    return value


def json_object(*, required: bool = True) -> dict[str, Any]:
    body = json_body(required=required)
    if body is None and not required:
        return {}
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="bad_json")
    return body
