"""A journal session's start leaves pyspark's numpy converters out (journal_spark.job._without_numpy_converter)."""

from __future__ import annotations

import sys
from typing import Any


def test_the_journal_session_never_loads_pyspark_testing_and_its_pandas(spark: Any) -> None:
    # Every call to the JVM with arguments went through py4j's input converters: pyspark's numpy
    # ones imported pyspark.testing.utils (pandas, pyarrow's pandas support and more) at the first.
    spark.createDataFrame([(1, "a")], "i int, s string").where("i = 1").count()
    assert "pyspark.testing.utils" not in sys.modules
