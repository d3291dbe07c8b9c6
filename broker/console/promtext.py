"""The journal job's health, read from its Prometheus text (``journal_spark.metrics``)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def journal_health(text: str) -> dict[str, Any]:
    """Rows journaled, micro-batches by outcome, the lag and the mean batch time, from ``text``.

    A text that does not parse gives ``{"error": ...}``: the page shows it, the node does not fail.
    """
    rows = lag = 0.0
    batches: dict[str, float] = {}
    seconds_sum = seconds_count = 0.0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                if name == "toymb_journal_rows_total":
                    rows = value
                elif name == "toymb_journal_lag_total":
                    lag = value
                elif name == "toymb_journal_batches_total":
                    outcome = str(labels.get("outcome", "?"))[:40]
                    batches[outcome] = batches.get(outcome, 0.0) + value
                elif name == "toymb_journal_batch_seconds_sum":
                    seconds_sum += value
                elif name == "toymb_journal_batch_seconds_count":
                    seconds_count += value
    except (ValueError, TypeError, IndexError) as exc:
        return {"error": f"its metrics do not parse: {type(exc).__name__}"}
    return {"rows": int(rows), "lag": int(lag), "batches": {k: int(v) for k, v in sorted(batches.items())[:16]},
            "mean_batch_s": round(seconds_sum / seconds_count, 3) if seconds_count else None}
