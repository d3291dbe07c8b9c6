"""Where the Delta Lake jars are, fetched from Maven Central by ``services/spark.sh`` on first use.

The journal's table is Delta Lake (see the README for why). Its jars are not part of PySpark:
``services/spark.sh install`` fetches exactly Delta's own jars (Spark, Scala, Hadoop and Parquet
come with PySpark) into ``<repo>/.services/spark/delta-<version>/``, like Kafka's. A journal
started from a checkout with no jars yet runs that script itself, so a first run needs nothing
by hand; ``TOYMB_DELTA_JARS`` names another folder (an installed package has no ``services/``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .errors import JournalError

DELTA_VERSION = "4.4.0"          # io.delta:delta-spark_4.2_2.13, for the PySpark 4.2 pyproject.toml pins
REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "services" / "spark.sh"


class DeltaJarsMissing(JournalError):
    """The Delta Lake jars are not there and cannot be fetched."""


def _folder() -> Path:
    named = os.environ.get("TOYMB_DELTA_JARS")
    if named:
        return Path(named)
    base = Path(os.environ.get("TOYMB_SERVICES_DIR") or REPO_ROOT / ".services")
    return base / "spark" / f"delta-{os.environ.get('TOYMB_DELTA_VERSION', DELTA_VERSION)}"


def delta_jars() -> list[str]:
    """The Delta jars' paths, fetching them first if this checkout has none.

    Raises:
        DeltaJarsMissing: no jars, and ``services/spark.sh install`` is missing or failed.
    """
    folder = _folder()
    if not (folder / ".complete").is_file() and not os.environ.get("TOYMB_DELTA_JARS"):
        if not SCRIPT.is_file():
            raise DeltaJarsMissing(f"no Delta Lake jars in {folder}, and no {SCRIPT} to fetch them: "
                                   "set TOYMB_DELTA_JARS to a folder holding delta-spark and delta-storage")
        done = subprocess.run(["bash", str(SCRIPT), "install"], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise DeltaJarsMissing(f"fetching the Delta Lake jars failed: {done.stderr[-1500:]}")
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any(Path(j).name.startswith("delta-spark") for j in jars):
        raise DeltaJarsMissing(f"no delta-spark jar in {folder}")
    return jars
