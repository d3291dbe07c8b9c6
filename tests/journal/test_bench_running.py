"""The bench's running-journal figure (``bench.journal_running``) times each backlog it was handed, all of it.

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


def test_the_running_journal_times_every_batch_of_each_backlog_and_no_other(spark: Any, tmp_path: Path) -> None:
    warm_per_topic, per_topic, max_rows = 1_000, 3_000, 2_500
    result = measure(spark, tmp_path, warm_per_topic, per_topic, max_rows, rounds=2)

    backlog = per_topic * len(TOPICS)
    assert result["rows"] == backlog
    assert result["warm_up_rows"] == warm_per_topic * len(TOPICS)
    assert len(result["rounds"]) == 2
    for measured in result["rounds"]:
        # Seen whole at one trigger: full batches of max_rows, then the rest; the warm-up's batch,
        # the other round's batches and the idle triggers are not among them.
        assert measured["rows"] == backlog
        assert measured["batch_rows"] == [2_500, 2_500, 1_000]
        assert measured["batches"] == 3
        # Batches of one query run one after another: their time fits in the span they cover.
        assert 0 < measured["journal_batches_s"] <= measured["journal_wall_s"]
        assert measured["ratio"] >= measured["ratio_wall"] > 0
    ratios = sorted(r["ratio"] for r in result["rounds"])
    assert result["ratio"] == (ratios[0] + ratios[1]) / 2      # the median of two

    # Every message, warm-up and both backlogs, journaled once (ids repeat across topics, not within one).
    rows = journal_rows(tmp_path / f"running-{per_topic}" / "journal")
    assert len(rows) == len({(r["topic"], r["id"]) for r in rows}) == 2 * backlog + result["warm_up_rows"]
