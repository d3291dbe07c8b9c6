"""Spark's Python processes, started without compiling pyspark again in each one.

Spark puts its own source archives, ``<pyspark>/python/lib/pyspark.zip`` and
``py4j-*-src.zip``, first on the ``PYTHONPATH`` of every Python process it starts: the daemons
and planner workers of the data source, the streaming source runner, the task workers. Python
caches no bytecode for modules imported from a zip, so each of those processes compiled pyspark
anew: 2.1 CPU-s to import ``pyspark.daemon`` instead of 0.5. With a journal job starting about
six of them, that was a third of its Python time.

In local mode the workers run on the driver's machine, and when they use the driver's own
interpreter, that interpreter has the very pyspark and py4j the archives were packed from
(they sit inside the installed package), with its bytecode compiled once. :func:`session_python`
then writes a small launcher that drops those two archives from ``PYTHONPATH`` and runs the
interpreter. Anything else (another interpreter, a cluster) keeps Spark's own behaviour.

The launcher is one file per interpreter in the user's cache folder, named by its content and
written once: a journal job killed with SIGKILL leaves nothing behind (a temporary folder per job
did, one per kill).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import sys
from pathlib import Path

_LAUNCHER = """#!/bin/sh
# Written by journal_spark/python_workers.py: {python} without pyspark's source archives on PYTHONPATH.
drop={drop}
kept=''
rest="$PYTHONPATH:"
while [ -n "$rest" ]; do
  entry=${{rest%%:*}}
  rest=${{rest#*:}}
  case $entry in
    "$drop"*|'') ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
PYTHONPATH=$kept
export PYTHONPATH
exec {python} "$@"
"""


def _archives_folder() -> Path | None:
    """``<installed pyspark>/python/lib``, where Spark finds the archives it puts on the path."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "python" / "lib"
    return folder if (folder / "pyspark.zip").is_file() else None


def session_python(master: str, python: str) -> str:
    """The interpreter Spark should start its Python processes with, for a session on ``master``.

    ``python`` itself, unless the session is local and ``python`` is this interpreter (the same
    ``bin`` folder, so the same packages): then a launcher of it, kept in :func:`launcher_folder`.
    Also ``python`` when that folder cannot be written.
    """
    archives = _archives_folder()
    same_interpreter = Path(python).parent.resolve() == Path(sys.executable).parent.resolve()
    if not master.startswith("local") or not same_interpreter or archives is None:
        return python
    text = _LAUNCHER.format(python=shlex.quote(python), drop=shlex.quote(f"{archives}/"))
    try:
        return str(_written(launcher_folder(), text))
    except OSError:
        return python


def launcher_folder() -> Path:
    """Where launchers are kept: ``$XDG_CACHE_HOME/toymb`` (default ``~/.cache/toymb``), private (0700)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(cache) / "toymb"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _written(folder: Path, text: str) -> Path:
    """The launcher holding ``text`` in ``folder``: named by its content, so the same interpreter
    reuses one file; written under a temporary name and renamed, so a concurrent job never runs
    half a script."""
    launcher = folder / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        if launcher.read_text() == text:
            return launcher
    except OSError:
        pass   # not written yet (or unreadable): write it
    partial = folder / f".{launcher.name}.{os.getpid()}"
    partial.write_text(text)
    partial.chmod(0o700)
    os.replace(partial, launcher)
    return launcher


def with_session_python(master: str) -> tuple[str | None, str]:
    """Point ``PYSPARK_PYTHON`` at :func:`session_python` for a session about to start.

    Returns the previous value (None when unset) and the new one; give the previous one to
    :func:`restore_python` once the session has started, so that processes this one starts later
    get the interpreter they were given.
    """
    previous = os.environ.get("PYSPARK_PYTHON")
    python = session_python(master, previous or sys.executable)
    os.environ["PYSPARK_PYTHON"] = python
    return previous, python


def restore_python(previous: str | None) -> None:
    """Undo :func:`with_session_python` in this process's environment (the session keeps its own)."""
    if previous is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = previous
