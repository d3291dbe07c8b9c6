"""Liveness, readiness and metrics."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from ..metrics import CONTENT_TYPE
from . import node

bp = Blueprint("health", __name__)


@bp.get("/health")
def health() -> Response:
    return jsonify(status="up", node=node().name)


@bp.get("/ready")
def ready() -> tuple[Response, int]:
    n = node()
    store_ok = n.store.ping()
    joined = n.started and all(getattr(s, "ready", True) for s in n.services)
    status = 200 if store_ok and joined else 503
    return jsonify(status="ready" if status == 200 else "not_ready", node=n.name, store=store_ok,
                   joined=joined), status


@bp.get("/metrics")
def metrics() -> Response:
    return Response(node().metrics.render(), mimetype=CONTENT_TYPE)
