"""Clustering: membership in the shared database, rendezvous ownership, forwarding, fencing.

``install(app, node)`` (called by :func:`broker.app.create_app`) wires it into a node:

- ``node.router``: :class:`~broker.cluster.router.Router` (``owner_of``, ``owns``,
  ``forward_if_remote``; ``router.listeners`` hear ownership gains and losses);
- ``node.appender.fence``: :class:`~broker.cluster.fencing.Fence`, the epoch check in every append;
- a :class:`~broker.cluster.membership.Membership` service (registration, heartbeats, the live
  set; ``ready`` once registered and loaded, which ``/ready`` waits for).

``GET /v1/cluster`` is in :mod:`broker.cluster.api`.

A node alone on SQLite is a cluster of one: the same code runs, and it owns every topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Flask

from .fencing import Fence
from .forward import CLUSTER_TOKEN_HEADER, FORWARDED_HEADER
from .membership import Membership
from .ownership import Member, owner
from .router import Router

__all__ = ["CLUSTER_TOKEN_HEADER", "FORWARDED_HEADER", "Cluster", "Member", "install", "owner"]


@dataclass
class Cluster:
    router: Router
    membership: Membership
    fence: Fence


def install(app: Flask, node: Any) -> Cluster:
    """Make ``node`` a cluster member: router, fence, membership service and ``/v1/cluster``."""
    router = Router(node)
    membership = Membership(node, router.on_view)
    router.membership = membership
    fence = Fence(router, node.appender, node.settings.node_lease_ms)
    router.fence = fence
    node.router = router
    node.appender.fence = fence
    node.services.append(membership)
    cluster = Cluster(router, membership, fence)
    node.extensions["cluster"] = cluster
    return cluster
