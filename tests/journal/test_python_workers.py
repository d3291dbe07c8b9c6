"""Spark's Python processes import the installed pyspark, not the source zip Spark puts first on their path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from journal_spark.python_workers import restore_python, session_python, with_session_python

ARCHIVES = Path(pyspark.__file__).parent / "python" / "lib"
PROBE = "import pyspark, py4j, sys; print(pyspark.__file__); print(py4j.__file__); print(':'.join(sys.path))"


def _spark_like_path(*extra: str) -> str:
    """``PYTHONPATH`` as Spark sets it for a worker: its two archives first, then the user's."""
    zips = [str(ARCHIVES / "pyspark.zip"), *map(str, ARCHIVES.glob("py4j-*-src.zip"))]
    return os.pathsep.join([*zips, *extra])


def _probe(python: str, pythonpath: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.splitlines()


def test_the_local_launcher_drops_only_the_archives(tmp_path: Path) -> None:
    mine = tmp_path / "user's modules"   # a space and a quote, as paths may have
    mine.mkdir()
    launcher = session_python("local[2]", sys.executable)
    assert launcher != sys.executable
    spark_file, py4j_file, path = _probe(launcher, _spark_like_path(str(mine)))
    assert spark_file == pyspark.__file__ and ".zip" not in py4j_file
    assert str(mine) in path.split(":") and "pyspark.zip" not in path
    # Without the launcher, the same path imports pyspark from the zip (compiled at every start).
    assert ".zip" in _probe(sys.executable, _spark_like_path(str(mine)))[0]


def test_other_interpreters_and_clusters_keep_sparks_own_behaviour(tmp_path: Path) -> None:
    assert session_python("spark://master:7077", sys.executable) == sys.executable
    other = tmp_path / "bin" / "python3"
    assert session_python("local[2]", str(other)) == str(other)


def test_the_launcher_is_the_sessions_alone() -> None:
    before = os.environ.get("PYSPARK_PYTHON")
    previous, launcher = with_session_python("local[1]")
    try:
        assert os.environ["PYSPARK_PYTHON"] == launcher and previous == before
    finally:
        restore_python(previous)
    assert os.environ.get("PYSPARK_PYTHON") == before


def test_one_launcher_per_interpreter_in_the_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept in the user's cache folder and reused: a SIGKILLed job leaves no folder of its own behind."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = session_python("local[2]", sys.executable)
    assert first == session_python("local[*]", sys.executable)
    folder = tmp_path / "cache" / "toymb"
    assert Path(first).parent == folder and [p.name for p in folder.iterdir()] == [Path(first).name]
    assert folder.stat().st_mode & 0o777 == 0o700
    # A launcher that was tampered with or cut short is written again, whole.
    Path(first).write_text("#!/bin/sh\nexit 3\n")
    assert session_python("local[2]", sys.executable) == first
    assert _probe(first, _spark_like_path())[0] == pyspark.__file__


def test_an_unwritable_cache_folder_keeps_sparks_own_behaviour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not a folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert session_python("local[2]", sys.executable) == sys.executable
