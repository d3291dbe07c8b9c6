"""Routing telemetry of the bridges, the seed's names in Prometheus form.

=========================================================  ==========================================
seed (JMX)                                                  Prometheus (labels ``jms_bridge_id``, ``sink``)
=========================================================  ==========================================
``stream-jms-bridge-metrics[...][routing-latency-avg]``      ``jms_bridge_routing_latency_avg`` (seconds)
``stream-jms-bridge-metrics[...][routing-success-rate]``     ``jms_bridge_routing_success_total``
``stream-jms-bridge-metrics[...][routing-failure-rate]``     ``jms_bridge_routing_failure_total``
=========================================================  ==========================================

The latency is the time to route and convert one record (predicate, key, headers, hand-off to
the producer), averaged since the job started, as the seed defines it. Counts are since start.
``jms_bridge_routing_failure_total`` has a ``reason`` label too (``no-key``, ``too-large``, ...),
and ``jms_bridge_routing_skipped_total`` (label ``reason``: ``cycle``, ``max-hops``,
``non-persistent``) counts messages not bridged on purpose.
One :class:`BridgeTelemetry` per job, shared by every bridge sink, registered once in the
journal's registry so the numbers are on the journal's ``/metrics``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class BridgeTelemetry(Collector):
    """Thread-safe routing counters of one bridge (all its sinks)."""

    def __init__(self, bridge_id: str, registry: CollectorRegistry | None = None) -> None:
        self.bridge_id = bridge_id
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = defaultdict(float)
        self._routed: dict[str, int] = defaultdict(int)
        self._failed: dict[tuple[str, str], int] = defaultdict(int)
        self._skipped: dict[tuple[str, str], int] = defaultdict(int)
        self.registry = registry or CollectorRegistry()
        self.registry.register(self)

    def routed(self, sink: str, count: int, seconds: float) -> None:
        """``count`` records routed and converted in ``seconds`` in all."""
        with self._lock:
            self._routed[sink] += count
            self._seconds[sink] += seconds

    def failed(self, sink: str, reason: str, count: int = 1) -> None:
        with self._lock:
            self._failed[(sink, reason)] += count

    def skipped(self, sink: str, count: int = 1, reason: str = "cycle") -> None:
        """``count`` records not bridged on purpose: ``cycle``, ``max-hops``, ``non-persistent``."""
        with self._lock:
            self._skipped[(sink, reason)] += count

    def skipped_count(self, sink: str, reason: str | None = None) -> int:
        with self._lock:
            return sum(n for (s, r), n in self._skipped.items() if s == sink and reason in (None, r))

    def counts(self, sink: str) -> tuple[int, int]:
        """``(successes, failures)`` of one sink, for logs and tests."""
        with self._lock:
            return self._routed[sink], sum(n for (s, _), n in self._failed.items() if s == sink)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            routed, seconds = dict(self._routed), dict(self._seconds)
            failed, skipped = dict(self._failed), dict(self._skipped)
        avg = GaugeMetricFamily("jms_bridge_routing_latency_avg",
                                "Average time to route and convert one record, seconds (routing-latency-avg)",
                                labels=["jms_bridge_id", "sink"])
        ok = CounterMetricFamily("jms_bridge_routing_success",
                                 "Records routed since the job started (routing-success-rate)",
                                 labels=["jms_bridge_id", "sink"])
        bad = CounterMetricFamily("jms_bridge_routing_failure",
                                  "Records that failed to route since the job started (routing-failure-rate)",
                                  labels=["jms_bridge_id", "sink", "reason"])
        loop = CounterMetricFamily("jms_bridge_routing_skipped",
                                   "Records not bridged on purpose: a cycle, too many hops, non-persistent",
                                   labels=["jms_bridge_id", "sink", "reason"])
        for sink in sorted(set(routed) | {s for s, _ in failed}):
            count = routed.get(sink, 0)
            avg.add_metric([self.bridge_id, sink], seconds.get(sink, 0.0) / count if count else 0.0)
            ok.add_metric([self.bridge_id, sink], count)
        for (sink, reason), n in sorted(failed.items()):
            bad.add_metric([self.bridge_id, sink, reason], n)
        for (sink, reason), n in sorted(skipped.items()):
            loop.add_metric([self.bridge_id, sink, reason], n)
        yield from (avg, ok, bad, loop)
