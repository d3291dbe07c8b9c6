"""The journal's row schema: the message envelope's columns, for Spark and for Arrow.

``headers`` is a ``map<string,string>`` (not JSON text) so Parquet readers get real maps, and
``body`` is the stored bytes, whatever the content type: nothing is decoded on the way.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

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

ARROW_SCHEMA = pa.schema([
    pa.field("id", pa.string(), False),
    pa.field("topic", pa.string(), False),
    pa.field("partition", pa.int32(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("key", pa.string(), True),
    pa.field("headers", pa.map_(pa.string(), pa.string()), False),
    pa.field("timestamp", pa.int64(), False),
    pa.field("content_type", pa.string(), False),
    pa.field("body", pa.binary(), False),
])

# The Parquet journal's layout: <journal>/topic=<t>/date=<yyyy-mm-dd>/ (dates in UTC).
PARTITION_COLUMNS: tuple[str, ...] = ("topic", "date")
