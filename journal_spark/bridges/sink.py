"""What every bridge sink of the journal shares: its routes, its telemetry, ``routing.on-error``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from itertools import repeat
from typing import Any

from ..predicates import header_map
from ..routes import DataError, Route, Routes, is_non_persistent, row_headers
from .telemetry import BridgeTelemetry

log = logging.getLogger(__name__)


def driver_rows(df: Any) -> Iterator[dict[str, Any]]:
    """A micro-batch's rows on the driver, each a dict of its columns, for a sink's hot loop.

    A pyspark ``Row`` finds a column by name with a linear search of its field names: about
    0.45 us a lookup (measured), and a bridge reads eight or nine columns a row. A dict built
    once per row (``dict(zip(columns, row))``, no Python frame) costs about what one lookup does.
    """
    return map(dict, map(zip, repeat(df.columns), df.toLocalIterator(prefetchPartitions=True)))


def describe_row(row: Any, route: Route) -> str:
    """A journaled row and its route, for logs and errors."""
    return f"message {row['id']} ({row['topic']}/{row['partition']}@{row['offset']}), route {route.name}"


class RouteSink:
    """A journal sink serving some of the routes of one routes file."""

    name: str
    ordered = True   # a bridge sends each partition's messages in offset order

    def __init__(self, routes: Routes, telemetry: BridgeTelemetry | None = None) -> None:
        self.routes = routes
        self.start = routes.start
        self.telemetry = telemetry or BridgeTelemetry(routes.bridge_id)
        self._skips_logged: set[tuple[str, str]] = set()

    def close(self) -> None:
        """Release the sink's clients (nothing here; sinks that keep a connection say how)."""

    def skip_reason(self, row: Any, route: Route, system: str) -> str | None:
        """Why ``row`` is not bridged to ``system`` by ``route``, or None to bridge it.

        ``cycle`` / ``max-hops`` (loop prevention, :meth:`Routes.loop_reason`) or ``non-persistent``
        (the route says ``non-persistent=drop``). Each skip is counted
        (``jms_bridge_routing_skipped_total{reason}``) and logged: a warning the first time per route
        and reason, then at debug level. A garbled hop count is a :class:`DataError`.
        """
        headers = header_map(row)
        reason = self.routes.loop_reason(headers, system)
        if reason is None and route.options.get("non-persistent") == "drop" and is_non_persistent(headers):
            reason = "non-persistent"
        if reason is None:
            return None
        self.telemetry.skipped(self.name, 1, reason)
        first = (route.name, reason) not in self._skips_logged
        self._skips_logged.add((route.name, reason))
        log.log(logging.WARNING if first else logging.DEBUG,
                "not bridged to %s (%s): %s%s", system, reason, describe_row(row, route),
                "; further ones of this route are counted in jms_bridge_routing_skipped_total" if first else "")
        return reason

    def dead_letter_headers(self, row: Any, route: Route, exc: DataError, where_to: str) -> dict[str, str] | None:
        """``routing.on-error`` for a row its route cannot carry: raise (fail), None (skip), or the
        headers of its dead letter (dead-letter), which say why and where it came from.

        Raises:
            DataError: the policy is ``fail``.
        """
        where = describe_row(row, route)
        self.telemetry.failed(self.name, exc.reason)
        policy = self.routes.on_error
        if policy == "fail":
            raise DataError(exc.reason, f"{where}: {exc}; routing.on-error=fail stops the bridge "
                                        "(set skip or dead-letter to go on)") from None
        if policy == "skip":
            log.warning("skipped %s: %s", where, exc)
            return None
        log.warning("dead-lettered %s to %s: %s", where, where_to, exc)
        headers = row_headers(row)
        headers.update({"toymb.dlq.reason": exc.reason, "toymb.dlq.error": str(exc)[:1000],
                        "toymb.dlq.route": route.name, "toymb.dlq.destination": route.destination.name,
                        "toymb.dlq.source": f"{row['topic']}/{row['partition']}/{row['offset']}",
                        "toymb.dlq.id": str(row["id"]), "jmsbridge.origin": self.routes.bridge_id})
        return headers
