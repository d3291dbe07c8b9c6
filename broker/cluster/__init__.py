"""Clustering: membership in the shared database, rendezvous ownership, forwarding, fencing.

:func:`broker.app.create_app` builds, for every node:

- :class:`~broker.cluster.membership.Membership`, a node service (registration, heartbeats, the
  live set; ``ready`` once registered and loaded, which ``/ready`` waits for);
- :class:`~broker.cluster.router.Router` (``owner_of``, ``owns``, ``forward_if_remote``), which
  hears each new live set from membership and tells its subscribers what changed hands;
- :class:`~broker.cluster.fencing.Fence`, the epoch check the writer runs in every append.

``GET /v1/cluster`` is in :mod:`broker.cluster.api`.

A node alone on SQLite is a cluster of one: the same code runs, and it owns every topic.
"""

from __future__ import annotations

from .fencing import Fence
from .forward import CLUSTER_TOKEN_HEADER, FORWARDED_HEADER
from .membership import Membership
from .ownership import Member, owner
from .router import Router

__all__ = ["CLUSTER_TOKEN_HEADER", "FORWARDED_HEADER", "Fence", "Member", "Membership", "Router", "owner"]
