"""The publish path's metrics (broker.metrics.PublishCounts) read as prometheus_client's own would."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from broker.metrics import PUBLISH_LATENCY_BUCKETS, Metrics


def _samples(text: bytes) -> set[str]:
    return {line for line in text.decode().splitlines() if "_created" not in line}


def test_same_samples_as_a_prometheus_counter_and_histogram() -> None:
    metrics = Metrics()
    reference = CollectorRegistry()
    latency = Histogram("toymb_publish_latency_seconds", "Publish request latency, receipt to commit",
                        registry=reference, buckets=PUBLISH_LATENCY_BUCKETS)
    requests = Counter("toymb_publish_requests", "Publish requests by outcome", ["outcome"], registry=reference)
    published = Counter("toymb_published_messages", "Messages stored by publishes", registry=reference)
    duplicates = Counter("toymb_duplicate_messages", "Publishes of ids the topic already held", registry=reference)
    # On a bound, between bounds, under the first and over the last.
    for seconds in (0.0001, 0.0005, 0.0007, 0.001, 0.003, 0.25, 5, 7.5):
        latency.observe(seconds)
        requests.labels("ok").inc()
        metrics.publishes.answered(seconds)
    published.inc(5)
    duplicates.inc(2)
    metrics.publishes.stored(3, 2)
    metrics.publishes.settled(2, 0, 0.002)
    latency.observe(0.002)
    requests.labels("ok").inc()
    ours = {line for line in _samples(metrics.render()) if "publish" in line or "duplicate" in line}
    assert ours == _samples(generate_latest(reference))
    assert metrics.registry.get_sample_value("toymb_published_messages_total") == 5.0


def test_counts_from_many_threads_are_all_kept() -> None:
    metrics = Metrics()

    def publish() -> None:
        for _ in range(1000):
            metrics.publishes.answered(0.002)
            metrics.publishes.stored(1, 0)
        for _ in range(1000):   # a request counted at once (a single publish answered on the loop)
            metrics.publishes.settled(1, 0, 0.002)

    threads = [threading.Thread(target=publish) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    get = metrics.registry.get_sample_value
    assert get("toymb_published_messages_total") == 8000.0
    assert get("toymb_publish_requests_total", {"outcome": "ok"}) == 8000.0
    assert get("toymb_publish_latency_seconds_bucket", {"le": "0.0025"}) == 8000.0
    assert get("toymb_publish_latency_seconds_bucket", {"le": "0.001"}) == 0.0
