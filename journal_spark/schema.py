"""The journal's row schema: the message envelope's columns, for Spark and for Arrow.

The source emits ``headers`` as the store's JSON text (``SOURCE_SCHEMA``): parsing it in Python,
row by row, would cost more than everything else the source does. :func:`with_header_map` turns
it into a ``map<string,string>`` inside the JVM, in parallel, before any sink sees a row, so
sinks and Parquet readers get real maps (``SPARK_SCHEMA``). ``body`` is the stored bytes,
whatever the content type: nothing is decoded on the way.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS: tuple[str, ...] = (
    "id", "topic", "partition", "offset", "key", "headers", "timestamp", "content_type", "body",
)

SPARK_SCHEMA = StructType([
    StructField("id", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("key", StringType(), True),
    StructField("headers", MapType(StringType(), StringType(), True), False),
    StructField("timestamp", LongType(), False),
    StructField("content_type", StringType(), False),
    StructField("body", BinaryType(), False),
])

HEADERS_TYPE = MapType(StringType(), StringType(), True)

# What the source emits: headers still as JSON text.
SOURCE_SCHEMA = StructType([f if f.name != "headers" else StructField("headers", StringType(), False)
                            for f in SPARK_SCHEMA.fields])

@functools.cache
def arrow_schema() -> pa.Schema:
    """The source's rows as Arrow (headers as JSON text), built on first use: importing pyarrow
    costs about 0.4 CPU-s, and most of Spark's Python processes that load this module never
    build a batch."""
    import pyarrow as pa

    return pa.schema([
        pa.field("id", pa.string(), False),
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("key", pa.string(), True),
        pa.field("headers", pa.string(), False),
        pa.field("timestamp", pa.int64(), False),
        pa.field("content_type", pa.string(), False),
        pa.field("body", pa.binary(), False),
    ])

# The Parquet journal's layout: <journal>/topic=<t>/date=<yyyy-mm-dd>/ (dates in UTC).
PARTITION_COLUMNS: tuple[str, ...] = ("topic", "date")


# ``headers`` (JSON text, or its UTF-8 bytes) as a map; none or malformed JSON gives an empty map.
# ``toymb_header_map`` is the journal's Java function (journal_spark/java/toymb/journal/HeaderMap.java,
# registered by :func:`register_functions`): it gives what
# ``coalesce(from_json(CAST(headers AS STRING), 'map<string,string>'), map())`` gave, parsing the
# bytes in place where from_json builds a reader and a UTF-8 decoder per row (measured, task CPU per
# row: the bench's two headers 1.30 -> 0.46 µs; the journal's tasks 9.3 -> 7.4 µs; README).
HEADER_MAP_FUNCTION = "toymb_header_map"
HEADER_MAP_CLASS = "toymb.journal.HeaderMap"
HEADERS_MAP_SQL = f"{HEADER_MAP_FUNCTION}(CAST(`headers` AS BINARY))"


def register_functions(spark: Any) -> None:
    """Register the journal's Java SQL functions (``toymb_header_map``) in ``spark``.

    Their jar is one of the journal's jars (:func:`journal_spark.delta_jars.journal_jars`), which
    the session must have been built with.
    """
    spark.udf.registerJavaFunction(HEADER_MAP_FUNCTION, HEADER_MAP_CLASS, HEADERS_TYPE)


def with_header_map(df: Any) -> Any:
    """``df`` (of ``SOURCE_SCHEMA``) with ``headers`` parsed into a map, giving ``SPARK_SCHEMA``."""
    from pyspark.sql import functions as F

    return df.withColumn("headers", F.expr(HEADERS_MAP_SQL))


def as_spark_schema(df: Any) -> Any:
    """``df`` (the store's columns, typed however its JDBC driver types them) as ``SPARK_SCHEMA``.

    One projection in SQL text: a micro-batch builds it anew for its rows, and each PySpark column
    call is a round trip to the JVM and each ``withColumn`` one more analysis of the plan, a
    per-batch cost that added up to tens of milliseconds for every micro-batch.
    """
    return df.selectExpr(*[HEADERS_MAP_SQL + " AS `headers`" if f.name == "headers"
                           else f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`"
                           for f in SPARK_SCHEMA.fields])
