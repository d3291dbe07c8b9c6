"""Prometheus metrics of one node, in a registry of its own (several apps can live in one process)."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PUBLISH_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class PublishCounts(Collector):
    """The publish path's metrics: messages stored (new and duplicate), publish requests and their latency.

    Exposed as a Counter and a Histogram of ``prometheus_client`` would be (the same names and
    samples), but counted under one lock per publish: those took four locks and a dozen calls,
    a fifth of the loop's work in answering a single publish.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._bounds = (*PUBLISH_LATENCY_BUCKETS, math.inf)
        self._buckets = [0] * len(self._bounds)
        self._latency_sum = 0.0
        self._requests = 0
        self._published = 0
        self._duplicates = 0
        self._created = time.time()
        registry.register(self)

    def stored(self, new: int, duplicates: int) -> None:
        """Count messages stored: ``new`` ones, and ``duplicates`` of ids stored before."""
        with self._lock:
            self._published += new
            self._duplicates += duplicates

    def answered(self, seconds: float) -> None:
        """Count a publish request answered after ``seconds`` (receipt to commit)."""
        self.settled(0, 0, seconds)

    def settled(self, new: int, duplicates: int, seconds: float) -> None:
        """:meth:`stored` and :meth:`answered` for one request, under one lock: a single publish's
        answer on the server's loop took the lock twice."""
        at = bisect.bisect_left(self._bounds, seconds)   # the first bucket whose bound is >= seconds
        with self._lock:
            self._published += new
            self._duplicates += duplicates
            self._buckets[at] += 1
            self._latency_sum += seconds
            self._requests += 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            published, duplicates, requests = self._published, self._duplicates, self._requests
            buckets, latency_sum = list(self._buckets), self._latency_sum
        created = self._created
        yield CounterMetricFamily("toymb_published_messages", "Messages stored by publishes", value=float(published),
                                  created=created)
        yield CounterMetricFamily("toymb_duplicate_messages", "Publishes of ids the topic already held",
                                  value=float(duplicates), created=created)
        by_outcome = CounterMetricFamily("toymb_publish_requests", "Publish requests by outcome", labels=["outcome"])
        by_outcome.add_metric(["ok"], float(requests), created=created)
        yield by_outcome
        cumulative, total = [], 0
        for bound, count in zip(self._bounds, buckets, strict=True):
            total += count
            cumulative.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
        yield HistogramMetricFamily("toymb_publish_latency_seconds", "Publish request latency, receipt to commit",
                                    buckets=cumulative, sum_value=latency_sum)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.publishes = PublishCounts(r)
        self.commit_rows = Histogram("toymb_group_commit_rows", "Rows per group commit", registry=r,
                                     buckets=(1, 2, 5, 10, 50, 100, 500, 1000, 5000))
        self.deliveries = Counter("toymb_deliveries", "Messages delivered and acknowledged",
                                  ["topic", "group", "mode"], registry=r)
        self.push_retries = Counter("toymb_push_retries", "Push attempts that failed and will be retried",
                                    ["topic", "group"], registry=r)
        self.dead_letters = Counter("toymb_dead_letters", "Messages moved to a dead-letter topic",
                                    ["topic", "group"], registry=r)
        self.lag = Gauge("toymb_group_lag", "Messages not yet acknowledged by a group",
                         ["topic", "group"], registry=r)
        self.forwards = Counter("toymb_forwards", "Requests forwarded to a topic's owner", registry=r)
        self.ownership_changes = Counter("toymb_ownership_changes", "Topics this node gained or lost",
                                         ["change"], registry=r)
        self.owned_topics = Gauge("toymb_owned_topics", "Topics this node owns", registry=r)
        self.auth_failures = Counter("toymb_auth_failures", "Refused requests", ["status"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
