"""Route predicates: ``msg.address==x``, ``msg.header.H!=v``, ``msg.key^=prefix`` ... with ``&&``, ``||``
and parentheses.

``^=`` is prefix matching (a missing header or key matches no prefix). The broker's subscription
filters (issue 21) use the same language, so a predicate means the same in a route and a filter.

See :mod:`journal_spark.routes` for the grammar. Rows are anything indexable by envelope column
name (a pyspark ``Row``, a dict).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .header_names import header_candidates, header_finder


def header_map(row: Any) -> Mapping[str, str]:
    """The row's headers to look up, not to change (no copy when Spark gave a dict already)."""
    raw = row["headers"]
    if raw is None:
        return {}
    if type(raw) is dict or isinstance(raw, Mapping):   # the type test first: it is the bridges' hot loop
        return raw
    return dict(raw)   # list of (key, value) pairs, from Arrow's to_pylist


def row_headers(row: Any) -> dict[str, str]:
    """The row's headers as a dict of its own, whatever shape Spark or Arrow gave them."""
    return dict(header_map(row))


def field_of(row: Any, operand: str) -> str | None:
    """The value an operand (``msg.address``, ``msg.key``, ``msg.id``, ``msg.header.H``) names.

    ``msg.header.H`` finds ``H``, else ``jms.H``; a JMS header field by any of its spellings
    (``CorrelationId``, ``JMSCorrelationID``; see :mod:`journal_spark.header_names`).
    """
    return field_getter(operand)(row)


@functools.lru_cache(maxsize=1024)
def field_getter(operand: str) -> Callable[[Any], str | None]:
    """:func:`field_of` for one operand, resolved once: predicates and ``conv.key`` keep theirs, so
    a bridge's per-message lookups are one call, not a parse of the operand each time."""
    column = _COLUMNS.get(operand)
    if column is not None:
        return lambda row: row[column]
    name = operand[len("msg.header."):]
    find, candidates = header_finder(name), header_candidates(name)

    def header(row: Any) -> str | None:
        raw = row["headers"]
        if type(raw) is dict:
            for candidate in candidates:     # find's first loop, inline: this runs for every message
                if candidate in raw:
                    value: str | None = raw[candidate]
                    return value
        return find(header_map(row))

    return header


_COLUMNS = {"msg.address": "topic", "msg.key": "key", "msg.id": "id"}


@dataclass(frozen=True)
class Compare:
    operand: str          # msg.address | msg.key | msg.id | msg.header.<H>
    op: str               # == | != | ^= (prefix)
    value: str

    get: Callable[[Any], str | None] = field(init=False, repr=False, compare=False)
    #: ``self(row)`` as one closure: filters and routes call it for every message.
    test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "get", field_getter(self.operand))
        object.__setattr__(self, "test", _compare_test(self.get, self.op, self.value))

    def __call__(self, row: Any) -> bool:
        return self.test(row)

    def on_address(self, address: str) -> bool | None:
        """The value for every message of broker topic ``address``, or None if it depends on more."""
        return self({"topic": address}) if self.operand == "msg.address" else None


def _compare_test(get: Callable[[Any], str | None], op: str, value: str) -> Callable[[Any], bool]:
    """A comparison's test as a closure per operator: no dispatch on ``op`` per message."""
    if op == "^=":
        def prefix(row: Any) -> bool:
            found = get(row)
            return found is not None and found.startswith(value)
        return prefix
    if op == "==":
        return lambda row: get(row) == value
    return lambda row: get(row) != value


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Predicate, ...]

    test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "test", _any_test(tuple(part.test for part in self.parts)))

    def __call__(self, row: Any) -> bool:
        return self.test(row)

    def on_address(self, address: str) -> bool | None:
        """See :meth:`Compare.on_address`: true if a part is, false if every part is."""
        values = [part.on_address(address) for part in self.parts]
        return True if True in values else (None if None in values else False)


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Predicate, ...]

    test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "test", _all_test(tuple(part.test for part in self.parts)))

    def __call__(self, row: Any) -> bool:
        return self.test(row)

    def on_address(self, address: str) -> bool | None:
        """See :meth:`Compare.on_address`: false if a part is, true if every part is."""
        values = [part.on_address(address) for part in self.parts]
        return False if False in values else (None if None in values else True)


# Two and three parts are the usual filters and routes: `a(row) or b(row)` costs less than a loop.
def _any_test(tests: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    if len(tests) == 2:
        a, b = tests
        return lambda row: a(row) or b(row)
    if len(tests) == 3:
        a, b, c = tests
        return lambda row: a(row) or b(row) or c(row)

    def any_of(row: Any) -> bool:
        for test in tests:
            if test(row):
                return True
        return False
    return any_of


def _all_test(tests: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    if len(tests) == 2:
        a, b = tests
        return lambda row: a(row) and b(row)
    if len(tests) == 3:
        a, b, c = tests
        return lambda row: a(row) and b(row) and c(row)

    def all_of(row: Any) -> bool:
        for test in tests:
            if not test(row):
                return False
        return True
    return all_of


Predicate = Compare | AnyOf | AllOf


def headers_test(predicate: Predicate) -> Callable[[Mapping[str, str]], bool] | None:
    """``predicate`` as one function of a message's headers, when it reads headers only (else None).

    A group's filter runs for every message a group is pushed. Its nested closures (a test per
    comparison, a lookup per operand, ``and``/``or`` per level) cost about three times one
    function that does the same; this one is generated from the predicate's shape alone: the
    operands' lookups (:func:`~journal_spark.header_names.header_finder`, the same as
    :func:`field_getter`'s) and the compared values are bound as names, never written into the
    source, so no text of the predicate reaches the compiler.
    """
    names: dict[str, Any] = {}

    def emit(part: Predicate) -> str:
        if isinstance(part, Compare):
            if not part.operand.startswith("msg.header."):
                raise LookupError(part.operand)
            n = len(names) // 2
            names[f"g{n}"] = header_finder(part.operand[len("msg.header."):])
            names[f"k{n}"] = part.value
            if part.op == "^=":
                return f"((v{n} := g{n}(h)) is not None and v{n}.startswith(k{n}))"
            return f"(g{n}(h) {'==' if part.op == '==' else '!='} k{n})"
        joiner = " or " if isinstance(part, AnyOf) else " and "
        return "(" + joiner.join(emit(p) for p in part.parts) + ")"

    try:
        source = f"lambda h: bool({emit(predicate)})"
    except LookupError:
        return None
    try:
        test: Callable[[Mapping[str, str]], bool] = eval(compile(source, "<filter>", "eval"), names)
    except (SyntaxError, RecursionError, MemoryError):   # only a speed-up: the closures still judge
        return None
    return test


# A "^" is part of a word unless "=" follows it (then it is the prefix operator).
_TOKEN = re.compile(r"""\s*(?:(?P<op>&&|\|\||==|!=|\^=|\(|\))|"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'"""
                    r"""|(?P<word>(?:[^\s()&|=!"'^]|\^(?!=))+))""")
#: Parentheses nest at most this deep (a hostile predicate must not exhaust the stack).
MAX_DEPTH = 32


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected {text[pos:].strip()[:20]!r}")
        pos = m.end()
        if m["op"]:
            out.append(("op", m["op"]))
        elif m["dq"] is not None:
            out.append(("str", re.sub(r"\\(.)", r"\1", m["dq"])))
        elif m["sq"] is not None:
            out.append(("str", m["sq"]))
        else:
            out.append(("word", m["word"]))
    return out


def parse_predicate(text: str) -> Predicate:
    """Compile a predicate; ValueError says what is wrong."""
    tokens = _tokens(text)
    if not tokens:
        raise ValueError("empty predicate")
    pos = 0

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("predicate ends too early")
        pos += 1
        return tokens[pos - 1]

    def disjunction() -> Predicate:
        parts = [conjunction()]
        while peek() == ("op", "||"):
            take()
            parts.append(conjunction())
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def conjunction() -> Predicate:
        parts = [atom()]
        while peek() == ("op", "&&"):
            take()
            parts.append(atom())
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    depth = 0

    def atom() -> Predicate:
        nonlocal depth
        kind, value = take()
        if (kind, value) == ("op", "("):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"parentheses nest deeper than {MAX_DEPTH}")
            inner = disjunction()
            depth -= 1
            if take() != ("op", ")"):
                raise ValueError("missing ')'")
            return inner
        if kind != "word" or not (value in ("msg.address", "msg.key", "msg.id")
                                  or (value.startswith("msg.header.") and len(value) > len("msg.header."))):
            raise ValueError(f"expected msg.address, msg.key, msg.id or msg.header.<name>, not {value!r}")
        op_kind, op = take()
        if op_kind != "op" or op not in ("==", "!=", "^="):
            raise ValueError(f"expected ==, != or ^= after {value}, not {op!r}")
        v_kind, literal = take()
        if v_kind not in ("word", "str"):
            raise ValueError(f"expected a value after {value}{op}, not {literal!r}")
        return Compare(value, op, literal)

    result = disjunction()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos][1]!r}")
    return result


