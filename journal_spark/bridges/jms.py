"""The JMS bridge's entry for :func:`journal_spark.bridges.sinks_for` (the sink: ``journal_spark.jms``)."""

from __future__ import annotations

import logging
from typing import Any

from ..jms.config import jms_connections
from ..jms.egress import EgressControl, JmsSink, connection_of
from ..jms.errors import JmsConfigError
from ..jms.manage import ManagementServer
from ..routes import Routes
from .telemetry import BridgeTelemetry

log = logging.getLogger(__name__)


def build_sinks(settings: Any, spark: Any, routes: Routes, telemetry: BridgeTelemetry) -> list[Any]:
    """One :class:`JmsSink` per JMS connection that a route with ``dest.jms.queue|topic`` names.

    With ``jms.egress.management.port`` (> 0), the sinks are managed over HTTP on 127.0.0.1 at that
    port (pause, resume, stop, start, status; see :mod:`journal_spark.jms.manage`).

    Raises:
        JmsConfigError: a connection key is wrong, or a route names an undefined connection.
    """
    connections = jms_connections(routes.settings)
    wanted: list[str] = []
    for route in routes.of_kind("jms-queue", "jms-topic"):
        name = connection_of(route)
        if name not in connections:
            raise JmsConfigError(f"{routes.path}:{route.line}: route {route.name} names the JMS connection "
                                 f"{name!r}, which is not defined ({', '.join(sorted(connections))})")
        if name not in wanted:
            wanted.append(name)
    sinks = [JmsSink(routes, telemetry, name) for name in wanted]
    port_text = routes.settings.get("jms.egress.management.port", "0").strip() or "0"
    try:
        port = int(port_text)
    except ValueError:
        raise JmsConfigError(f"jms.egress.management.port must be a TCP port, not {port_text!r}") from None
    if not 0 <= port < 65536:
        raise JmsConfigError(f"jms.egress.management.port must be a TCP port, not {port}")
    if port and sinks:
        controls: dict[str, Any] = {s.name: EgressControl(s) for s in sinks}
        server = ManagementServer(controls, telemetry.registry, "127.0.0.1", port).start()
        log.info("JMS egress management on http://127.0.0.1:%d/bridges", server.port)
    return sinks
