"""``GET /v1/cluster``: the registered nodes, which are alive, and which node answered."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from ..api import node

bp = Blueprint("cluster", __name__, url_prefix="/v1/cluster")


@bp.get("")
def cluster() -> Response:
    n = node()
    membership = n.extensions["cluster"].membership
    view = membership.view
    return jsonify(
        node=n.name, node_id=n.id, url=n.url, lease_fresh=membership.lease_fresh(),
        lease_ms=n.settings.node_lease_ms, heartbeat_ms=n.settings.heartbeat_ms, checked_at=view.db_now_ms,
        nodes=[row.to_json() for row in sorted(view.rows, key=lambda r: r.name)],
        live=[m.name for m in view.live], owned_topics=len(n.router.owned),
        peers=[{"url": url, "status": status} for url, status in sorted(membership.peer_status.items())],
    )
