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


def with_header_map(df: Any) -> Any:
    """``df`` (of ``SOURCE_SCHEMA``) with ``headers`` parsed into a map, giving ``SPARK_SCHEMA``."""
    from pyspark.sql import functions as F

    # As DDL text: PySpark 4.2's stubs type from_json's schema without MapType, which it accepts.
    return df.withColumn("headers", F.coalesce(F.from_json(F.col("headers"), HEADERS_TYPE.simpleString()),
                                               F.create_map().cast(HEADERS_TYPE)))
