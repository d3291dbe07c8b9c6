"""The app factory: ``create_app(settings)`` builds a node and its Flask app."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from . import config as config_module
from .api import ROUTES_EXTENSION, compat, health, json_object, openapi, topics
from .api import node as node_of_app
from .api.fast_json import FastJSONProvider
from .api.routes import Route, Routes
from .cluster import api as cluster_api
from .config import Settings
from .delivery import api as delivery_api
from .delivery import api_control as delivery_control
from .delivery import compat as delivery_compat
from .delivery.api import check_subscriber_id
from .errors import BrokerError
from .publish import check_name
from .security import guard
from .store.errors import STORE_REFUSED_VALUE, STORE_UNAVAILABLE
from .wiring import build_node

log = logging.getLogger(__name__)


def _error_response(code: str, message: str, status: int, **extra: Any) -> tuple[Response, int]:
    return jsonify(error=code, message=message, **extra), status


# A client retries a 503 after this many seconds (the store or an owner is away for now).
RETRY_AFTER_S = "1"
# GET endpoints that move a subscriber's position: HEAD must not run them without a body.
_NO_HEAD = frozenset({"delivery.fetch", "delivery_compat.poll"})


def register_error_handlers(app: Flask) -> None:
    @app.before_request
    def refuse_head_on_fetch() -> tuple[Response, int] | None:
        if request.method == "HEAD" and request.endpoint in _NO_HEAD:
            response, status = _error_response("method_not_allowed", "a fetch moves the subscriber: use GET", 405)
            response.headers["Allow"] = "GET"
            return response, status
        return None

    @app.errorhandler(BrokerError)
    def broker_error(exc: BrokerError) -> tuple[Response, int]:
        response = jsonify(exc.to_json())
        if exc.status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        if exc.status == 503:
            response.headers["Retry-After"] = RETRY_AFTER_S
        return response, exc.status

    def store_unavailable(exc: Exception) -> tuple[Response, int]:
        log.warning("store unavailable: %s", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        response, status = _error_response("unavailable", f"the store cannot be reached now ({type(exc).__name__})",
                                           503)
        response.headers["Retry-After"] = RETRY_AFTER_S
        return response, status

    def store_refused_value(exc: Exception) -> tuple[Response, int]:
        return _error_response("bad_value", "the store refused a value of this request", 400)

    for unavailable in STORE_UNAVAILABLE:
        app.register_error_handler(unavailable, store_unavailable)
    for refused in STORE_REFUSED_VALUE:
        app.register_error_handler(refused, store_refused_value)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        status = exc.code or 500
        if status == 413:
            limit = app.config["MAX_CONTENT_LENGTH"]
            return _error_response("payload_too_large", f"the request body is over {limit} bytes (TOYMB_MAX_REQUEST)",
                                   413, limit="request", max=limit)
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            status, (exc.name or "error").lower().replace(" ", "_"))
        return _error_response(code, exc.description or exc.name, status)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> tuple[Response, int]:
        log.exception("unhandled error")
        return _error_response("internal_error", f"unexpected {type(exc).__name__}; see the node's log", 500)


# Every endpoint of a node, in the order the OpenAPI document lists them.
ROUTE_TABLES = (health.routes, openapi.routes, cluster_api.routes, topics.routes, delivery_api.routes,
                compat.routes, delivery_compat.routes, delivery_control.routes)


def _request_topic(route: Route, path: dict[str, Any]) -> str:
    """The topic a routed request is about, checked: from its path, its JSON body, or its subscriber."""
    if route.topic == "path":
        return check_name(path["topic"])
    if route.topic == "body":
        return check_name(json_object().get("topicName"))
    return node_of_app().delivery.subscriber(check_subscriber_id(path["sid"])).topic


def create_app(settings: Settings | dict[str, Any] | None = None, *, start: bool = True) -> Flask:
    """Build a node's Flask app. ``settings`` may be :class:`Settings` or overrides for :func:`config.load`.

    The node (store, writer, delivery, cluster) is at ``app.extensions["toymb"]``; with ``start``
    its background services run until ``app.extensions["toymb"].stop()``.

    Raises:
        ConfigError: a setting is malformed.
    """
    if not isinstance(settings, Settings):
        settings = config_module.load(overrides=settings or {})
    app = Flask("toymb")
    app.json = FastJSONProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request
    routes = Routes(ROUTE_TABLES)
    node, authorizer = build_node(settings, routes)
    app.extensions["toymb"] = node
    app.extensions[ROUTES_EXTENSION] = routes
    guard(app, authorizer, node.metrics, settings)
    for table in ROUTE_TABLES:
        app.register_blueprint(table.blueprint(node.forward_if_remote, _request_topic))
    register_error_handlers(app)
    if start:
        node.start()
    return app
