"""A class-data-sharing archive of the journal's JVM, so a job starts by mapping Spark's classes
instead of loading and verifying them again.

Measured on a 2-core machine, for ``toymb journal run --once`` on 2,000 messages: the driver JVM
used 18 CPU-s and the whole job took 31 s; with the archive, 10 CPU-s and 22 s. Building it costs
one such run plus about 8 s to write it.

The archive is JDK 17's dynamic CDS: one job run with ``-XX:ArchiveClassesAtExit`` writes the
classes it loaded; later JVMs of the same JDK and class path map them with
``-XX:SharedArchiveFile``. Any other JVM given the option (another class path, another JDK) only
ignores it, and the option's own log lines are off.

    python -m journal_spark.jvm_archive build [FOLDER]    # once per JDK and Spark install
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# What every JVM of the tests runs with (see tests/conftest.py): the archive is built with the same.
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_ROWS = 2000  # enough for one real micro-batch: the classes of reading, writing and committing


def archive_path(folder: Path) -> Path:
    """Where the archive of this JDK and Spark install lives in ``folder``.

    The name changes with any of them, so a stale archive (which the JVM would only ignore) is
    never taken for the current one.
    """
    java = shutil.which("java") or "java"
    spec = importlib.util.find_spec("pyspark")
    jars = Path(spec.origin).parent / "jars" if spec is not None and spec.origin else Path("jars")
    stamp = jars.stat().st_mtime_ns if jars.exists() else 0
    key = "\0".join([os.path.realpath(java), str(jars), str(stamp)])
    return folder / f"spark-cds-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_options(archive: Path, base: str = BASE_OPTIONS) -> str:
    """``JDK_JAVA_OPTIONS`` that use ``archive`` when it exists (else just ``base``)."""
    if not archive.is_file():
        return base
    return f"{base} -XX:SharedArchiveFile={archive} {_QUIET}"


def build(archive: Path, python: str = sys.executable, base: str = BASE_OPTIONS) -> None:
    """Run one small journal job that writes the archive of its classes to ``archive``.

    The file appears only once it is complete (written beside it, then renamed), so a JVM that
    starts meanwhile never maps half an archive.

    Raises:
        RuntimeError: the job failed or wrote no archive.
    """
    from broker.appender import Appender
    from broker.envelope import NewMessage
    from broker.store import Store

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="toymb-cds-") as work:
        folder = Path(work)
        url = f"sqlite:///{folder / 'toymb.db'}"
        store = Store(url)
        store.create_schema()
        appender = Appender(store)
        appender.start()
        try:
            topic, _ = store.ensure_topic("warm-up", 4)
            appender.append(topic, [NewMessage(f"m{i}", f"k{i % 7}", {"n": str(i)}, "text/plain", b"x" * 64)
                                    for i in range(_ROWS)])
        finally:
            appender.stop()
            store.dispose()
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
        env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
                   JDK_JAVA_OPTIONS=f"{base} -XX:ArchiveClassesAtExit={partial} {_QUIET}")
        done = subprocess.run(
            [python, "-m", "broker", "journal", "run", "--once", "--database-url", url,
             "--journal-dir", str(folder / "journal"), "--checkpoint-dir", str(folder / "checkpoints"),
             "--metrics-port", "0"],
            env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"the warm-up journal job failed ({done.returncode}): {done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")
        os.replace(partial, archive)


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2 or argv[0] != "build":
        print("usage: python -m journal_spark.jvm_archive build [FOLDER]", file=sys.stderr)
        return 2
    archive = archive_path(Path(argv[1] if len(argv) == 2 else ".services").resolve())
    if archive.is_file():
        print(f"{archive} is there already")
        return 0
    build(archive)
    print(f"wrote {archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
