"""The journal over PostgreSQL and MariaDB (the cluster's stores), and the CLI's error without Java."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.store.journal import JournalStore
from journal_spark.job import journal_stream
from journal_spark.source import read_end_offsets
from journal_spark.table import DeltaSink
from tests.journal.conftest import assert_journal_matches, fill_store


@pytest.mark.parametrize("server", ["pg_url", "mariadb_url"])
def test_journal_over_a_database_server(spark: Any, request: pytest.FixtureRequest, server: str,
                                        tmp_path: Path) -> None:
    url: str = request.getfixturevalue(server)
    store = fill_store(url, {"orders": (5, 2500), "audit": (2, 500)})
    journal = JournalStore(url, pooled=False)
    sink = DeltaSink(tmp_path / "journal", tmp_path / "ck", journal)
    # The job's own stream: the source plans, Spark's JDBC reader reads each batch's rows.
    batches: list[int] = []
    query = journal_stream(spark, url, tmp_path / "ck" / DeltaSink.name, sink, max_rows=1000,
                           write=lambda df, batch_id: (batches.append(batch_id), sink.write_batch(df, batch_id)))
    query = query.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()
    # 3,000 rows in batches of at most 1,000; on failure, each batch's planned offsets say why
    # (seen once with one batch, not reproduced in 6 runs).
    assert len(batches) >= 3, [(p["batchId"], p["sources"][0]["startOffset"], p["sources"][0]["endOffset"])
                               for p in query.recentProgress]
    assert_journal_matches(tmp_path / "journal", store)
    ends = read_end_offsets(JournalStore.of(store))
    assert journal.journaled_offsets() == {(t, p): n for t, parts in ends.items() for p, n in enumerate(parts)}
    journal.dispose()
    store.dispose()


def test_journal_run_says_java_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOYMB_", "JAVA_HOME"))}
    env.update({"PATH": str(tmp_path), "TOYMB_DATA_DIR": str(tmp_path), "TOYMB_JOURNAL_METRICS_PORT": "0"})
    done = subprocess.run([sys.executable, "-m", "broker", "journal", "run", "--once"], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "needs Java 17 or newer" in done.stderr and "JAVA_HOME" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_journal_on_a_taken_metrics_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        env.update({"TOYMB_DATA_DIR": str(tmp_path), "TOYMB_JOURNAL_METRICS_PORT": str(port)})
        done = subprocess.run([sys.executable, "-m", "broker", "journal", "run", "--once"], env=env,
                              cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"cannot serve the journal's /metrics on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "--metrics-port of its own" in done.stderr and "Traceback" not in done.stderr
