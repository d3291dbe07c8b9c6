"""Prometheus metrics of one node, in a registry of its own (several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.published = Counter("toymb_published_messages", "Messages stored by publishes", registry=r)
        self.duplicates = Counter("toymb_duplicate_messages", "Publishes of ids the topic already held",
                                  registry=r)
        self.publish_requests = Counter("toymb_publish_requests", "Publish requests by outcome",
                                        ["outcome"], registry=r)
        self.publish_latency = Histogram(
            "toymb_publish_latency_seconds", "Publish request latency, receipt to commit", registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
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
