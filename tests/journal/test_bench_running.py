"""The bench's running-journal figure (``bench.journal_running``) times the backlog it was handed, all of it.

``toymb bench --only journal`` holds its throughput ratio to the 0.6 target on a long-running
query that drains a backlog revealed at once. The figure is wrong if the query sees the backlog
in pieces (smaller batches, idle gaps timed as work), if the warm-up's batches or idle triggers
are counted with it, or if the rows it times are not the ones the ceiling writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.journal import TOPICS
from bench.journal_running import measure
from tests.journal.conftest import journal_rows


def test_the_running_journal_times_every_batch_of_the_backlog_and_no_other(spark: Any, tmp_path: Path) -> None:
    warm_per_topic, per_topic, max_rows = 1_000, 3_000, 2_500
    result = measure(spark, tmp_path, warm_per_topic, per_topic, max_rows)

    backlog = per_topic * len(TOPICS)
    assert result["rows"] == backlog
    assert result["warm_up_rows"] == warm_per_topic * len(TOPICS)
    # Seen whole at one trigger: full batches of max_rows, then the rest; the warm-up's batch and
    # the idle triggers are not among them.
    assert result["batch_rows"] == [2_500, 2_500, 1_000]
    assert result["batches"] == 3
    # Batches of one query run one after another: their time fits in the span they cover.
    assert 0 < result["journal_batches_s"] <= result["journal_wall_s"]
    assert result["ratio"] >= result["ratio_wall"] > 0

    # Every message, warm-up and backlog, journaled once (ids repeat across topics, not within one).
    rows = journal_rows(tmp_path / f"running-{per_topic}" / "journal")
    assert len(rows) == len({(r["topic"], r["id"]) for r in rows}) == backlog + result["warm_up_rows"]
