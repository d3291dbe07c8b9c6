"""The app factory: ``create_app(settings)`` builds a node and its Flask app."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, request

from . import config as config_module
from .api import ROUTES_EXTENSION, compat, health, json_object, openapi, topics
from .api import node as node_of_app
from .api.answers import Answer, error_answer
from .api.fast_json import FastJSONProvider
from .api.fast_publish import PublishFastPath
from .api.routes import Route, Routes
from .cluster import api as cluster_api
from .config import Settings
from .console.api import routes as console_routes
from .delivery import api as delivery_api
from .delivery import api_control as delivery_control
from .delivery import compat as delivery_compat
from .delivery.api import check_subscriber_id
from .publish import check_name
from .security import guard
from .wiring import build_node

log = logging.getLogger(__name__)


# GET endpoints that move a subscriber's position: HEAD must not run them without a body.
_NO_HEAD = frozenset({"delivery.fetch", "delivery_compat.poll"})


def _json_answer(answer: Answer) -> tuple[Response, int]:
    status, body, headers = answer
    response = jsonify(body)
    response.headers.update(headers)
    return response, status


def register_error_handlers(app: Flask) -> None:
    @app.before_request
    def refuse_head_on_fetch() -> tuple[Response, int] | None:
        if request.method == "HEAD" and request.endpoint in _NO_HEAD:
            response, status = _json_answer(
                (405, {"error": "method_not_allowed", "message": "a fetch moves the subscriber: use GET"}, {}))
            response.headers["Allow"] = "GET"
            return response, status
        return None

    @app.errorhandler(Exception)
    def any_error(exc: Exception) -> tuple[Response, int]:
        return _json_answer(error_answer(exc, app.config["MAX_CONTENT_LENGTH"]))


# Every endpoint of a node, in the order the OpenAPI document lists them.
ROUTE_TABLES = (health.routes, openapi.routes, cluster_api.routes, topics.routes, delivery_api.routes,
                compat.routes, delivery_compat.routes, delivery_control.routes, console_routes)


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
    # Werkzeug merged "//" and answered an HTML 308 to the merged path: an empty topic
    # ("/v1/topics//messages") was sent to the topic "messages". A path is taken as written.
    app.url_map.merge_slashes = False
    routes = Routes(ROUTE_TABLES)
    node, authorizer = build_node(settings, routes)
    app.extensions["toymb"] = node
    app.extensions[ROUTES_EXTENSION] = routes
    guard(app, authorizer, node.metrics, settings)
    for table in ROUTE_TABLES:
        app.register_blueprint(table.blueprint(node.forward_if_remote, _request_topic))
    register_error_handlers(app)
    app.wsgi_app = PublishFastPath(app.wsgi_app, node, authorizer, routes)  # type: ignore[method-assign]
    if start:
        node.start()
    return app
