"""The journal's bridges: sinks that route journaled messages to Kafka (and to JMS).

``toymb journal run --routes FILE`` calls :func:`build_sinks`; each returned sink gets its own
Spark query and checkpoint. Kafka routes go to :class:`.kafka.KafkaSink`; JMS routes to the
sinks of ``journal_spark.bridges.jms`` (a module exposing
``build_sinks(settings, spark, routes, telemetry) -> list[Sink]``).
"""

from __future__ import annotations

import logging
from typing import Any

from ..routes import Routes, RoutesError
from ..routes_file import load_routes
from .telemetry import BridgeTelemetry

log = logging.getLogger(__name__)


def build_sinks(settings: Any, spark: Any, metrics: Any = None) -> list[Any]:
    """The bridge sinks ``settings.routes`` asks for; startup checks raise JournalError subclasses.

    ``metrics`` is the job's ``JournalMetrics``: the routing telemetry registers in its registry,
    so it is served on the journal's ``/metrics``.
    """
    routes = load_routes(settings.routes)
    registry = getattr(metrics, "registry", None)
    if registry is None:
        log.warning("bridge telemetry is not registered with the journal's /metrics (no registry given)")
    telemetry = BridgeTelemetry(routes.bridge_id, registry)
    return sinks_for(routes, telemetry, settings, spark)


def sinks_for(routes: Routes, telemetry: BridgeTelemetry, settings: Any = None,
              spark: Any = None) -> list[Any]:
    """The sinks of ``routes``: Kafka's here, JMS's from ``journal_spark.bridges.jms``."""
    sinks: list[Any] = []
    if routes.of_kind("kafka"):
        from .kafka import KafkaSink

        sinks.append(KafkaSink(routes, telemetry))
    if routes.of_kind("jms-queue", "jms-topic"):
        try:
            from . import jms
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.jms":
                raise
            raise RoutesError(f"{routes.path}: JMS routes need the JMS bridge, "
                              "which this build lacks") from None
        sinks.extend(jms.build_sinks(settings, spark, routes, telemetry))
    if routes.of_kind("jetstream"):
        from nats_bridge.jetstream_sink import JetStreamSink

        sinks.append(JetStreamSink(routes, telemetry))
    if not sinks:
        log.warning("routes file %s has no routes: no bridge runs", routes.path)
    return sinks
