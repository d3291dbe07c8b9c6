"""The journal job refuses a store it cannot read from its own processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.cli import main
from broker.config import load
from journal_spark.errors import UnsharedStore
from journal_spark.job import run


def test_the_journal_refuses_a_memory_store_before_starting_anything(tmp_path: Path) -> None:
    settings = load(env={}, overrides={"data_dir": str(tmp_path), "database_url": "memory://node-1"})
    with pytest.raises(UnsharedStore, match="memory://"):
        run(settings, once=True)
    assert not any(tmp_path.iterdir()), "no checkpoint, journal or database was made"


def test_journal_run_says_why_a_memory_store_cannot_be_journaled(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["journal", "run", "--once", "--data-dir", str(tmp_path),
                                       "--database-url", "memory://node-1"], env={"TOYMB_JOURNAL_METRICS_PORT": "0"})
    assert result.exit_code == 1
    assert "memory://" in result.output and "sqlite://, postgresql:// or mysql://" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
