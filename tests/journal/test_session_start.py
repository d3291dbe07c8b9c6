"""A journal session's start leaves pyspark's numpy converters out (journal_spark.job._without_numpy_converter)."""

from __future__ import annotations

import sys
from typing import Any


def test_the_journal_session_never_loads_pyspark_testing_and_its_pandas(spark: Any) -> None:
    # Every call to the JVM with arguments went through py4j's input converters: pyspark's numpy
    # ones imported pyspark.testing.utils (pandas, pyarrow's pandas support and more) at the first.
    spark.createDataFrame([(1, "a")], "i int, s string").where("i = 1").count()
    assert "pyspark.testing.utils" not in sys.modules


def test_the_falling_behind_warning_of_the_spark_in_use_is_quieted(spark: Any) -> None:
    # A backlog drained in big batches printed "Current batch is falling behind" at every trigger:
    # the class that logs it must exist under the name quieted (Spark 4.2 moved it), at ERROR.
    jvm = spark.sparkContext._jvm
    name = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"
    jvm.java.lang.Class.forName(name)          # raises if this Spark has no such class
    level = jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel()
    assert level.toString() == "ERROR"
