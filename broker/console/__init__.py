"""The operator console: one page on every node, and the overview it polls.

- ``GET /console``: a self-contained page (its script and style are served by the node; no CDN).
- ``GET /console/api/overview``: cluster, topics, groups' lag and stuck partitions, push state,
  journal offsets and health, bridges (consume or admin role).
- ``POST /console/api/bridges/action``: pause or resume a bridge at a configured address (admin).

``toymb status [--watch]`` prints the same overview in a terminal (:mod:`broker.console.status`).
The routes are in :mod:`broker.console.api`; this package imports nothing, so that ``toymb status``
(a client: click and requests) does not load the node's Flask routes, store and SQLAlchemy.
"""

from __future__ import annotations

