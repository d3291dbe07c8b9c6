"""Prometheus metrics of the NATS bridge, per bridge name, in a registry of their own.

The counters keep nats-jms-bridge's names (``request_count``, ``request_response_count``,
``request_response_missing_count``, ``received_count``, ``publish_count`` and their ``*_errors``);
prometheus_client exposes a counter ``x`` as ``x_total``, as Micrometer does. Added: timeouts, late
replies, decode errors by reason, a request latency histogram and the pending gauge.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .protocol import DECODE_REASONS

STATES = ("STARTED", "PAUSED", "STOPPED")


class BridgeMetrics:
    """Every metric of the bridge process; labels: ``bridge`` (and ``reason`` for decode errors)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        label = ["bridge"]
        self.request_count = Counter("request_count", "Requests sent on to the other side", label, registry=r)
        self.request_errors = Counter("request_errors", "Requests that could not be sent on", label, registry=r)
        self.request_response_count = Counter("request_response_count", "Replies passed back to the requester",
                                              label, registry=r)
        self.request_response_errors = Counter("request_response_errors", "Replies that could not be passed back",
                                               label, registry=r)
        self.request_response_missing_count = Counter(
            "request_response_missing_count", "Replies matching no pending request (late ones included)", label,
            registry=r)
        self.request_timeout_count = Counter("request_timeout_count", "Requests that got no reply in time", label,
                                             registry=r)
        self.late_reply_count = Counter("late_reply_count", "Replies that came after their request timed out "
                                        "(dropped)", label, registry=r)
        self.received_count = Counter("received_count", "Messages received from the source", label, registry=r)
        self.received_errors = Counter("received_errors", "Source messages that could not be read", label,
                                       registry=r)
        self.publish_count = Counter("publish_count", "Messages forwarded (published and confirmed)", label,
                                     registry=r)
        self.publish_errors = Counter("publish_errors", "Forwards that failed (retried or skipped)", label,
                                      registry=r)
        self.decode_errors = Counter("decode_errors", "Corrupt header-protocol frames, by reason",
                                     ["bridge", "reason"], registry=r)
        self.latency = Histogram("request_latency_seconds", "Request to reply, as the bridge sees it", label,
                                 registry=r, buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5,
                                                      5, 10, 30))
        self.pending = Gauge("pending_requests", "Requests waiting for their reply", label, registry=r)
        self.state = Gauge("bridge_state", "1 for the bridge's current state", ["bridge", "state"], registry=r)
        self.connected = Gauge("connected", "1 while the side (nats, jms) is connected", ["side"], registry=r)

    def register(self, bridge: str) -> None:
        """Create every series of ``bridge`` at 0, so dashboards see them before the first event."""
        for metric in (self.request_count, self.request_errors, self.request_response_count,
                       self.request_response_errors, self.request_response_missing_count, self.request_timeout_count,
                       self.late_reply_count, self.received_count, self.received_errors, self.publish_count,
                       self.publish_errors, self.pending, self.latency):
            metric.labels(bridge)
        for reason in DECODE_REASONS:
            self.decode_errors.labels(bridge, reason)

    def set_state(self, bridge: str, state: str) -> None:
        for candidate in STATES:
            self.state.labels(bridge, candidate).set(1 if candidate == state else 0)
