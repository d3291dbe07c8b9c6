"""HTTP blueprints of a node; each module owns one resource."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from flask import current_app, g, request

from ..errors import BadRequest
from ..strict_json import parse_json

if TYPE_CHECKING:
    from ..node import Node
    from .routes import Routes

ROUTES_EXTENSION = "toymb.routes"


def node() -> Node:
    """The :class:`broker.node.Node` of the current app."""
    return cast("Node", current_app.extensions["toymb"])


def node_routes() -> Routes:
    """Every route of the current app (see :mod:`broker.api.routes`)."""
    return cast("Routes", current_app.extensions[ROUTES_EXTENSION])


def json_body(*, required: bool = True) -> Any:
    """The request's JSON body, or BadRequest naming what is wrong with it (see ``strict_json``).

    Parsed once per request: forwarding may read a body's topic before the handler reads the rest.
    """
    if "toymb_json" in g:
        return g.toymb_json
    parsed = _parse_body(required=required)
    if parsed is not None:
        g.toymb_json = parsed
    return parsed


def _parse_body(*, required: bool) -> Any:
    return parse_json(request.get_data(cache=True), required=required)


def json_object(*, required: bool = True) -> dict[str, Any]:
    body = json_body(required=required)
    if body is None and not required:
        return {}
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="bad_json")
    return body
