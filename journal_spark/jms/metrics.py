"""Prometheus metrics of the JMS bridge (ingress and egress), in a registry the caller gives."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

STATES = ("STOPPED", "STARTED", "PAUSED", "FAILED")


class JmsMetrics:
    """Counters per bridge name; ``toymb_jms_bridge_failed`` is 1 while a bridge is FAILED."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.messages = Counter(
            "toymb_jms_ingress_messages", "Messages brought in from JMS", ["bridge"], registry=r
        )
        self.batches = Counter(
            "toymb_jms_ingress_batches", "Batches brought in from JMS", ["bridge"], registry=r
        )
        self.aborted = Counter("toymb_jms_ingress_aborted", "Messages dropped (AT_MOST_ONCE losses, refused)",
                               ["bridge"], registry=r)
        self.skipped = Counter("toymb_jms_ingress_skipped",
                               "Messages not brought in: dropped non-persistent, skipped or dead-lettered "
                               "soft failures", ["bridge", "reason"], registry=r)
        self.failures = Counter("toymb_jms_bridge_connection_failures", "Connection failures", ["bridge"],
                                registry=r)
        self.failed = Gauge("toymb_jms_bridge_failed", "1 when the bridge spent max-retries and stopped",
                            ["bridge"], registry=r)
        self.bridge_state = Gauge(
            "toymb_jms_bridge_state", "1 for the bridge's current state", ["bridge", "state"], registry=r
        )

    def state(self, bridge: str, state: str) -> None:
        self.failed.labels(bridge).set(1 if state == "FAILED" else 0)
        for candidate in STATES:
            self.bridge_state.labels(bridge, candidate).set(1 if candidate == state else 0)
