"""The journal job's Prometheus metrics, served on ``/metrics`` (``journal_metrics_port``).

The lag is computed when scraped, from the store: end offsets (``toymb_partitions``) minus what
the journal recorded (``toymb_journal_offsets``), per topic. It is therefore right even across
restarts of the job, and reads O(partitions) rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.store import JournalRepository

from .source import read_end_offsets

log = logging.getLogger(__name__)


def journal_lag(store: JournalRepository) -> dict[str, int]:
    """Messages stored but not yet journaled, per topic."""
    journaled = store.journaled_offsets()
    lag: dict[str, int] = {}
    for topic, ends in read_end_offsets(store).items():
        lag[topic] = sum(max(0, end - journaled.get((topic, p), 0)) for p, end in enumerate(ends))
    return lag


class LagCollector(Collector):
    def __init__(self, store: JournalRepository) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("toymb_journal_lag", "Messages stored but not yet in the Parquet journal",
                                   labels=["topic"])
        total = GaugeMetricFamily("toymb_journal_lag_total", "Journal lag over all topics")
        try:
            lag = journal_lag(self.store)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the store is down
            log.warning("cannot compute the journal lag: %s", exc)
            return
        for topic, value in sorted(lag.items()):
            family.add_metric([topic], value)
        total.add_metric([], sum(lag.values()))
        yield family
        yield total


class JournalMetrics:
    """Counters updated by the sinks, and the lag gauge; one registry per job."""

    def __init__(self, store: JournalRepository | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rows = Counter("toymb_journal_rows", "Rows written to the Parquet journal", registry=r)
        self.batches = Counter("toymb_journal_batches", "Micro-batches by sink and outcome",
                               ["sink", "outcome"], registry=r)
        self.batch_seconds = Histogram("toymb_journal_batch_seconds", "Time to make one micro-batch durable",
                                       ["sink"], registry=r,
                                       buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
        if store is not None:
            r.register(LagCollector(store))
        self._server: Any = None

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0 means off); returns the bound port or 0."""
        if port == 0:
            return 0
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
