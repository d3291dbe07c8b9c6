"""The JMS bridge's entry for :func:`journal_spark.bridges.sinks_for` (the sink: ``journal_spark.jms``)."""

from __future__ import annotations

from typing import Any

from ..jms.egress import JmsSink
from ..routes import Routes
from .telemetry import BridgeTelemetry


def build_sinks(settings: Any, spark: Any, routes: Routes, telemetry: BridgeTelemetry) -> list[Any]:
    """One :class:`JmsSink` for every route with a ``dest.jms.queue`` or ``dest.jms.topic``."""
    return [JmsSink(routes, telemetry)]
