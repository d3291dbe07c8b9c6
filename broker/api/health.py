"""Liveness, readiness and metrics."""

from __future__ import annotations

from flask import Response, jsonify

from ..metrics import CONTENT_TYPE
from . import node
from .docs import errors, json_answer, obj, text_answer
from .routes import ADMIN, OPEN, RouteTable

routes = RouteTable("health")


@routes.add("GET", "/health", role=OPEN, summary="Liveness", doc=lambda s: {"responses": {"200": json_answer(
    obj({"status": {"type": "string", "enum": ["up"]}, "node": {"type": "string"}}, ("status", "node")))}})
def health() -> Response:
    return jsonify(status="up", node=node().name)


@routes.add("GET", "/actuator/health", role=OPEN, summary="Liveness in Spring Boot's form (ToyMB's health check)",
            doc=lambda s: {"responses": {"200": json_answer(
                obj({"status": {"type": "string", "enum": ["UP"]}}, ("status",)))}})
def actuator_health() -> Response:
    """ToyMB's container health check calls Spring Boot's actuator: the same liveness as ``/health``."""
    return jsonify(status="UP")


@routes.add("GET", "/ready", role=OPEN, summary="Readiness: store reachable and cluster joined",
            doc=lambda s: {"responses": {
                code: json_answer(obj({"status": {"type": "string", "enum": ["ready", "not_ready"]},
                                       "node": {"type": "string"}, "store": {"type": "boolean"},
                                       "joined": {"type": "boolean"}}, ("status", "node")), text)
                for code, text in (("200", "Ready"), ("503", "Not ready"))}})
def ready() -> tuple[Response, int]:
    n = node()
    store_ok = n.store.ping()
    joined = n.started and all(getattr(s, "ready", True) for s in n.services)
    status = 200 if store_ok and joined else 503
    return jsonify(status="ready" if status == 200 else "not_ready", node=n.name, store=store_ok,
                   joined=joined), status


@routes.add("GET", "/metrics", role=ADMIN, summary="Prometheus metrics",
            doc=lambda s: {"responses": {"200": text_answer("Prometheus text format"), **errors()}})
def metrics() -> Response:
    # content_type, not mimetype: Flask adds "; charset=utf-8" to a mimetype, and CONTENT_TYPE has one.
    return Response(node().metrics.render(), content_type=CONTENT_TYPE)
