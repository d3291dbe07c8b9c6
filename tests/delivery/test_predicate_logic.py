"""The predicate language's meaning, checked against plain Python over every combination of headers.

Filters (issue 21) and routes share these predicates, and they are evaluated by closures built per
shape (two, three or more parts of ``&&``/``||``; one per operator): each shape is held to the
same truth table here, so a wrong ``and``/``or`` or operator in one of them cannot go unnoticed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from journal_spark.predicates import headers_test, parse_predicate

VALUES = (None, "1", "2", "10")   # None: the header is absent


def _rows() -> list[dict[str, Any]]:
    rows = []
    for a, b, c, d in itertools.product(VALUES, repeat=4):
        headers = {name: value for name, value in zip("abcd", (a, b, c, d), strict=True) if value is not None}
        rows.append({"topic": "t", "key": a, "id": f"id-{b}", "headers": headers})
    return rows


def h(row: dict[str, Any], name: str) -> str | None:
    value: str | None = row["headers"].get(name)
    return value


CASES: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
    ("msg.header.a==1", lambda r: h(r, "a") == "1"),
    ("msg.header.a!=1", lambda r: h(r, "a") != "1"),        # a missing header differs from every value
    ("msg.header.a^=1", lambda r: (h(r, "a") or "").startswith("1") and h(r, "a") is not None),
    ("msg.header.a==1 && msg.header.b==2", lambda r: h(r, "a") == "1" and h(r, "b") == "2"),
    ("msg.header.a==1 || msg.header.b==2", lambda r: h(r, "a") == "1" or h(r, "b") == "2"),
    ("msg.header.a^=1 && msg.header.b!=2 && msg.header.c==10",
     lambda r: h(r, "a") is not None and str(h(r, "a")).startswith("1") and h(r, "b") != "2" and h(r, "c") == "10"),
    ("msg.header.a==2 || msg.header.b==1 || msg.header.c^=1",
     lambda r: h(r, "a") == "2" or h(r, "b") == "1" or (h(r, "c") is not None and str(h(r, "c")).startswith("1"))),
    ("msg.header.a==1 && msg.header.b==1 && msg.header.c!=2 && msg.header.d!=10",
     lambda r: h(r, "a") == "1" and h(r, "b") == "1" and h(r, "c") != "2" and h(r, "d") != "10"),
    ("msg.header.a==2 || msg.header.b==2 || msg.header.c==2 || msg.header.d==2 || msg.key==1",
     lambda r: "2" in (h(r, "a"), h(r, "b"), h(r, "c"), h(r, "d")) or r["key"] == "1"),
    ("(msg.header.a==1 || msg.header.b==1) && (msg.header.c!=1 || msg.header.d==1)",
     lambda r: (h(r, "a") == "1" or h(r, "b") == "1") and (h(r, "c") != "1" or h(r, "d") == "1")),
    ("msg.header.a==1 && msg.header.b==1 || msg.header.c==1 && msg.header.d==1",   # && binds tighter
     lambda r: (h(r, "a") == "1" and h(r, "b") == "1") or (h(r, "c") == "1" and h(r, "d") == "1")),
    ("msg.key^=1 && msg.id==id-2 && msg.address==t",
     lambda r: r["key"] is not None and r["key"].startswith("1") and r["id"] == "id-2"),
    ("msg.address!=t || msg.id!=id-None", lambda r: r["id"] != "id-None"),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[text for text, _ in CASES])
def test_every_shape_means_what_the_text_says(text: str, expected: Callable[[dict[str, Any]], bool]) -> None:
    predicate = parse_predicate(text)
    rows = _rows()
    wrong = [r for r in rows if predicate(r) != expected(r)]
    assert not wrong, f"{text}: {len(wrong)} of {len(rows)} rows judged wrongly, e.g. {wrong[:3]}"
    assert any(predicate(r) for r in rows) and not all(predicate(r) for r in rows), "the cases must discriminate"


def test_headers_as_key_value_pairs_and_jms_spellings_mean_the_same() -> None:
    """Spark and Arrow give headers as (key, value) pairs; a JMS field is found by any spelling."""
    predicate = parse_predicate("msg.header.CorrelationId==c-1 && (msg.header.color==red || msg.header.size^=big)")
    as_dict = {"topic": "t", "headers": {"jms.JMSCorrelationID": "c-1", "jms.color": "red"}}
    as_pairs = {"topic": "t", "headers": [("jms.JMSCorrelationID", "c-1"), ("size", "bigger")]}
    assert predicate(as_dict) and predicate(as_pairs)
    assert not predicate({"topic": "t", "headers": [("jms.CorrelationId", "c-2"), ("size", "bigger")]})
    assert not predicate({"topic": "t", "headers": None})


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[text for text, _ in CASES])
def test_a_filter_compiled_to_one_function_of_the_headers_means_the_same(
        text: str, expected: Callable[[dict[str, Any]], bool]) -> None:
    """Push groups run a headers-only filter as one generated function (``headers_test``): it must
    judge every row as the text says; a filter that reads the topic, key or id keeps the closures."""
    compiled = headers_test(parse_predicate(text))
    if "msg.header." not in text or any(op in text for op in ("msg.key", "msg.id", "msg.address")):
        assert compiled is None
        return
    assert compiled is not None
    rows = _rows()
    wrong = [r for r in rows if compiled(r["headers"]) != expected(r)]
    assert not wrong, f"{text}: {len(wrong)} of {len(rows)} rows judged wrongly, e.g. {wrong[:3]}"


@pytest.mark.parametrize("value", ["a) or (1", "__import__('os').system('false')", 'x" + "y', "\\", "k0", "h",
                                   "é€\U0001f600", "v0)) or True or ((1"])
def test_compared_values_never_reach_the_compiler(value: str) -> None:
    """Hostile values are compared as strings, quoted either way, and an operand's header name is only a lookup."""
    for quoted in (f'"{value}"' if '"' not in value and "\\" not in value else f"'{value}'",):
        compiled = headers_test(parse_predicate(f"msg.header.a=={quoted} || msg.header.{'b'}^={quoted}"))
        assert compiled is not None
        assert compiled({"a": value}) and compiled({"b": value + "tail"})
        assert not compiled({"a": value + "x"}) and not compiled({}) and not compiled({"b": "z" + value})


def test_the_compiled_filter_finds_jms_spellings_like_the_closures() -> None:
    text = "msg.header.CorrelationId==c-1 && (msg.header.color==red || msg.header.size^=big)"
    compiled, predicate = headers_test(parse_predicate(text)), parse_predicate(text)
    assert compiled is not None
    for headers in ({"jms.JMSCorrelationID": "c-1", "jms.color": "red"}, {"JMSCorrelationID": "c-1", "size": "bigger"},
                    {"jms.CorrelationId": "c-2", "size": "bigger"}, {}, {"correlationid": "c-1", "color": "red"}):
        assert compiled(headers) == predicate({"topic": "t", "headers": headers}), headers


def test_a_deep_filter_compiles() -> None:
    """Parentheses nest up to the parser's limit; the generated function nests as deep."""
    from journal_spark.predicates import MAX_DEPTH

    text = "(" * MAX_DEPTH + "msg.header.a==1" + " || msg.header.b==2)" * MAX_DEPTH
    compiled = headers_test(parse_predicate(text))
    assert compiled is not None and compiled({"b": "2"}) and not compiled({"a": "2"})
