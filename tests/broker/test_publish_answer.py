"""A committed publish's answer, encoded natively from its coordinates (the fast path's way), is
byte for byte the answer made through a dict per message (Flask's way, and the fast path's before)."""

from __future__ import annotations

import json

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from broker.api.fast_json import answer_bytes, stored_answer_bytes
from broker.outcomes import Stored
from broker.publish import Publisher

stored_lists = st.lists(st.builds(Stored, st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=20),
                                  st.integers(0, 1023), st.integers(0, 2**63 - 1), st.booleans()),
                        min_size=1, max_size=30)


def the_dict_way(is_batch: bool, stored: list[Stored]) -> tuple[int, bytes]:
    status, body = Publisher.answer_body(is_batch, stored)
    return status, answer_bytes(body)


def the_native_way(is_batch: bool, stored: list[Stored]) -> tuple[int, bytes]:
    return Publisher.answer_status(is_batch, stored), stored_answer_bytes(is_batch, stored)


@given(stored_lists, st.booleans())
@example([Stored('q"\\\n\t\x00\x1f\x7f é ✓ 😀 \u2028', "t", 0, 0)], True)
@example([Stored("a", "t", 1, 2, True), Stored("b", "t", 1, 3)], True)
@example([Stored("a", "t", 1, 2, True), Stored("b", "t", 1, 3, True)], True)
def test_both_ways_give_the_same_status_and_bytes(stored: list[Stored], is_batch: bool) -> None:
    assert the_native_way(is_batch, stored) == the_dict_way(is_batch, stored)


def test_the_answer_holds_each_message_s_coordinates_in_order() -> None:
    stored = [Stored("m1", "orders", 3, 17), Stored("m2", "orders", 0, 4, True)]
    status, body = the_native_way(True, stored)
    assert status == 201
    assert json.loads(body) == {"messages": [
        {"id": "m1", "topic": "orders", "partition": 3, "offset": 17, "duplicate": False},
        {"id": "m2", "topic": "orders", "partition": 0, "offset": 4, "duplicate": True}]}
    assert the_native_way(False, [Stored("m2", "orders", 0, 4, True)]) == (
        200, b'{"id":"m2","topic":"orders","partition":0,"offset":4,"duplicate":true}\n')


def test_a_lone_surrogate_is_written_as_the_dict_way_writes_it() -> None:
    stored = [Stored("a\ud800b", "t", 0, 1)]
    for is_batch in (True, False):
        assert the_native_way(is_batch, stored) == the_dict_way(is_batch, stored)
    assert b"\\ud800" in stored_answer_bytes(False, stored)


def test_coordinates_are_immutable_and_compare_by_value() -> None:
    one = Stored("a", "t", 0, 1)
    assert one == Stored("a", "t", 0, 1, False) and hash(one) == hash(Stored("a", "t", 0, 1))
    assert msgspec.structs.replace(one, duplicate=True) == Stored("a", "t", 0, 1, True)
    try:
        one.offset = 2  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a Stored was changed in place")
