"""Where the journal's jars are: Delta Lake's and the stores' JDBC drivers, fetched by ``services/spark.sh``.

The journal's table is Delta Lake (see the README for why), and it reads each micro-batch's rows
with Spark's JDBC reader (:mod:`.batch_rows`). None of those jars is part of PySpark:
``services/spark.sh install`` fetches exactly Delta's own jars and the drivers of SQLite,
PostgreSQL and MariaDB (Spark, Scala, Hadoop and Parquet come with PySpark) from Maven Central,
and compiles the journal's own Java functions (``journal_spark/java``) against PySpark's jars into
``toymb-journal-functions.jar``, all into ``<repo>/.services/spark/delta-<version>-jdbc-<tag>-java-<tag>/``,
like Kafka's. The journal asks that script for the folder, which fetches and builds the jars the
first time, so a first run needs nothing by hand; ``TOYMB_DELTA_JARS`` names another folder (an
installed package has no ``services/``; that folder then needs ``toymb-journal-functions.jar`` too).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .errors import JournalError

DELTA_VERSION = "4.4.0"          # io.delta:delta-spark_4.2_2.13, for the PySpark 4.2 pyproject.toml pins
REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "services" / "spark.sh"
# A jar of each of these must be there: the table's format, the store drivers' (one per store), and
# the journal's own Java functions (journal_spark/java, compiled by the script: see .schema).
REQUIRED = ("delta-spark", "delta-storage", "sqlite-jdbc", "postgresql", "mariadb-java-client",
            "toymb-journal-functions")


class DeltaJarsMissing(JournalError):
    """The journal's jars are not there and cannot be fetched."""


def _folder() -> Path:
    named = os.environ.get("TOYMB_DELTA_JARS")
    if named:
        return Path(named)
    if not SCRIPT.is_file():
        raise DeltaJarsMissing(f"no {SCRIPT} to fetch the journal's jars (Delta Lake, JDBC drivers): "
                               "set TOYMB_DELTA_JARS to a folder holding them")
    done = subprocess.run(["bash", str(SCRIPT), "jars"], capture_output=True, text=True, timeout=900)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise DeltaJarsMissing(f"fetching the journal's jars failed: {done.stderr[-1500:]}")
    return Path(lines[-1])


def journal_jars() -> list[str]:
    """The paths of the jars the journal adds to Spark, fetching them first if this checkout has none.

    Raises:
        DeltaJarsMissing: no jars, and ``services/spark.sh`` is missing or failed, or a jar is missing.
    """
    folder = _folder()
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    missing = [name for name in REQUIRED if not any(Path(j).name.startswith(name) for j in jars)]
    if missing:
        raise DeltaJarsMissing(f"no {', '.join(missing)} jar in {folder} (services/spark.sh install fetches them)")
    return jars
