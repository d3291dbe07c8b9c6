"""is_strict_json answers as strict_json does, for hostile documents too."""

from __future__ import annotations

import pytest

from broker.strict_json import MAX_JSON_DEPTH, is_strict_json, strict_json

DOCUMENTS = [
    b'{"a": 1}', b' [1, 2.5, "x"] \n', b"12345678901234567890123456789012345", b'{"n": -98765432109876543210}',
    b"1e400", b"-1e400", b"NaN", b'{"a": Infinity}', b'"\\ud800"', b'["\\udc00x"]', b"\xff\xfe", b'"\xed\xa0\x80"',
    b"\xef\xbb\xbf{}", b"", b"{", b'{"a":1,}', b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
    b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, b'{"a":"' + b"[" * 300 + b'"}', b'{"a":1,"a":2}', b"\x00",
]


@pytest.mark.parametrize("raw", DOCUMENTS)
def test_is_strict_json_agrees_with_strict_json(raw: bytes) -> None:
    try:
        strict_json(raw)
        accepted = True
    except ValueError:
        accepted = False
    assert is_strict_json(raw) is accepted
