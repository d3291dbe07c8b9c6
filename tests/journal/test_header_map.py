"""The journal's header parser (``toymb_header_map``, Java) gives the maps Spark's ``from_json`` gave."""

from __future__ import annotations

from typing import Any

import pytest

from journal_spark.schema import HEADERS_MAP_SQL, HEADERS_TYPE

FROM_JSON = (f"coalesce(from_json(CAST(`headers` AS STRING), '{HEADERS_TYPE.simpleString()}'), "
             f"CAST(map() AS {HEADERS_TYPE.simpleString()}))")

# What the store holds (json.dumps of the envelope's headers), and what a hand-edited row might.
HEADERS = [
    "{}", '{"seq":"1","source":"bench"}', '{"jms.CorrelationId":"c-1","trace":"t-\\u00e9\\n\\"x\\""}',
    '{"":""}', '{"a":"b","a":"c"}', '  {"a" : "b"}  ', '{"a":"b"} trailing', '{"a":"b"}{"c":"d"}',
    '{"n":1,"f":1.50e3,"t":true,"z":null,"l":[1,"x",{"y":2}],"o":{"p":"q"}}',
    "[]", "3", '"x"', "null", "", "   ", "not json", '{"a":"b"', '{"a":', '{"a" "b"}', "{,}",
    '{"k":"' + "x" * 200_000 + '"}', "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000,
]


def _both(spark: Any, rows: list[tuple[int, Any]], kind: str) -> list[Any]:
    df = spark.createDataFrame(rows, f"i int, headers {kind}")
    return df.selectExpr("i", f"{FROM_JSON} AS before", f"{HEADERS_MAP_SQL} AS now").orderBy("i").collect()


def test_header_maps_are_what_from_json_gave(spark: Any) -> None:
    """Valid, odd, malformed, huge and deep JSON alike: the same map, and never an error."""
    for row in _both(spark, list(enumerate(HEADERS)), "string"):
        assert row.now == row.before, f"headers {HEADERS[row.i][:60]!r}: {row.now} != {row.before}"
    assert _both(spark, [(0, '{"seq":"1","source":"bench"}')], "string")[0].now == {"seq": "1", "source": "bench"}


@pytest.mark.parametrize("raw", [b'{"a":"\xff\xfe"}', b"\x00\x01{", b'{"a":"\xc3"}'])
def test_bad_bytes_give_an_empty_map(spark: Any, raw: bytes) -> None:
    """Not UTF-8 (the store writes headers as ASCII JSON, so only a hand-edited row has these)."""
    [row] = spark.createDataFrame([(raw,)], "headers binary").selectExpr(f"{HEADERS_MAP_SQL} AS now").collect()
    assert row.now == {}
