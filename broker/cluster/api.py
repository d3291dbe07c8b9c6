"""``GET /v1/cluster``: the registered nodes, which are alive, and which node answered."""

from __future__ import annotations

from flask import Response, jsonify

from ..api import node
from ..api.docs import errors, json_answer, ref
from ..api.routes import ANY, RouteTable

routes = RouteTable("cluster")


@routes.add("GET", "/v1/cluster", role=ANY, summary="The nodes of the cluster, and which answered",
            doc=lambda s: {"responses": {"200": json_answer(ref("Cluster")), **errors()}})
def cluster() -> Response:
    n = node()
    membership = n.membership
    view = membership.view
    return jsonify(
        node=n.name, node_id=n.id, url=n.url, lease_fresh=membership.lease_fresh(),
        lease_ms=n.settings.node_lease_ms, heartbeat_ms=n.settings.heartbeat_ms, checked_at=view.db_now_ms,
        nodes=[row.to_json() for row in sorted(view.rows, key=lambda r: r.name)],
        live=[m.name for m in view.live], owned_topics=len(n.router.owned),
        peers=[{"url": url, "status": status} for url, status in sorted(membership.peer_status.items())],
    )
