"""strict_json's fast path (orjson) accepts exactly what the standard-library path accepts, with
the same values: a document either parses to the same value on both, or is refused by both."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.strict_json import MAX_JSON_DEPTH, _stdlib_strict_json, strict_json

any_text = st.text(st.characters(exclude_categories=()), max_size=12)
numbers = (st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(
    st.none() | st.booleans() | numbers | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=16,
)
# Tokens that sit at the edges of what JSON (and each parser) allows.
EDGES = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"-0", b"0.0", b"01", b"1.",
         b"\"\\ud800\"", b"\"\\udc00\\ud800\"", b"\"\xed\xa0\x80\"", b"\"\xff\"", b"\xef\xbb\xbf{}", b"\"\x01\"",
         b"18446744073709551616", b"-9223372036854775809", b"9223372036854775807", b"123456789012345678",
         b"{\"a\":1,\"a\":2}", b"[1,]", b"{,}", b"tru", b"null x", b" \t\r\n[ ]", b"\"\\u0000\"", b"\"\\x41\""]


def outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", json.dumps(parse(raw), sort_keys=True, ensure_ascii=False, allow_nan=True)
    except ValueError:
        return "refused", None


def same(raw: bytes) -> None:
    fast, slow = outcome(strict_json, raw), outcome(_stdlib_strict_json, raw)
    assert fast == slow, raw[:200]


@given(values, st.sampled_from([None, 0, 2]))
@settings(max_examples=600, deadline=None)
def test_documents_parse_to_the_same_value_on_both_paths(value: Any, indent: int | None) -> None:
    raw = json.dumps(value, indent=indent, ensure_ascii=False).encode("utf-8", "surrogatepass")
    same(raw)
    same(json.dumps(value).encode())  # \\u escapes, lone surrogates among them


@given(values, st.lists(st.tuples(st.integers(0, 400), st.sampled_from(EDGES + [b"[", b"]", b"\"", b","])),
                        min_size=1, max_size=3))
@settings(max_examples=600, deadline=None)
def test_damaged_documents_are_refused_or_accepted_alike(value: Any, edits: list[tuple[int, bytes]]) -> None:
    raw = json.dumps(value).encode()
    for where, token in edits:
        at = where % (len(raw) + 1)
        raw = raw[:at] + token + raw[at:]
    same(raw)


@pytest.mark.parametrize("token", EDGES)
def test_edge_tokens_alone_and_inside_documents(token: bytes) -> None:
    for raw in (token, b"[" + token + b"]", b"{\"k\":" + token + b"}"):
        same(raw)


def test_big_integers_stay_exact_and_overflowing_numbers_are_refused() -> None:
    assert strict_json(b"[123456789012345678901234567890]") == [123456789012345678901234567890]
    assert strict_json(b"-9223372036854775809") == -9223372036854775809
    with pytest.raises(ValueError, match="out of range"):
        strict_json(b"[1e400]")
    assert not math.isnan(strict_json(b"1e-400"))


def test_depth_is_refused_past_the_limit_on_the_fast_path() -> None:
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(ValueError, match="nested deeper"):
        strict_json(deep)
    fine = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert strict_json(fine) is not None
