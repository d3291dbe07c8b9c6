"""The native decoding of publish bodies agrees with the whole way (strict_json, then parse_message).

``decode_publish`` may decline any body; a body it takes must give exactly the messages that the
whole way gives, and a body the whole way refuses must never be taken.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.envelope import Limits, NewMessage
from broker.errors import BrokerError
from broker.publish import Publisher
from broker.publish_decode import decode_publish
from broker.strict_json import parse_json

LIMITS = Limits(max_body=300, max_headers=3, max_header_name=5, max_header_value=8, max_id=6)
MAX_BATCH = 4


class _Settings:
    max_batch = MAX_BATCH


def whole_way(raw: bytes) -> tuple[list[NewMessage], bool]:
    publisher = Publisher.__new__(Publisher)
    publisher.settings = _Settings()  # type: ignore[assignment]
    publisher.limits = LIMITS
    return publisher.parse_payload(parse_json(raw))


def comparable(message: NewMessage, given_time: bool) -> tuple[Any, ...]:
    """What a client decided: the broker's own ids and clock readings differ from call to call."""
    return (message.id if message.given_id else None, message.key, message.headers, message.content_type,
            message.body, message.timestamp if given_time else None, message.given_id)


# Clean messages within every limit, which must be taken alike; and messages with values on both
# sides of every limit and the characters that have their own rules, which must be judged alike.
chars = st.sampled_from(["a", "é", "😀", '"', "\\", "\n", "\x7f"])
clean_texts = st.text(alphabet=chars, min_size=1, max_size=7)
texts = st.text(alphabet=st.sampled_from(["a", "é", "\x00", "\ud800", "😀", '"', "\\", "\n"]), max_size=9)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                           | texts, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=12)
content_types = st.sampled_from(["text/plain", "application/json", "application/x+json", "application/octet-stream"])
clean_fields = {  # each up to one past its limit (see LIMITS)
    "id": clean_texts,
    "key": st.text(alphabet=chars, max_size=7),
    "headers": st.dictionaries(st.text(alphabet=chars, min_size=1, max_size=6), st.text(alphabet=chars, max_size=9),
                               max_size=4),
    "body": json_values | st.text(alphabet=chars, max_size=305) | st.sampled_from(["x" * 300, "x" * 301, "é" * 151]),
    "content_type": content_types,
    "timestamp": st.integers(-1, 2**53) | st.sampled_from([-1, 2**53 - 1, 2**53]),
}
clean_messages = st.fixed_dictionaries({}, optional=clean_fields) | st.fixed_dictionaries(  # type: ignore[arg-type]
    {"body_base64": st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())},
    optional={"content_type": content_types, "id": clean_texts})
any_fields = {
    "id": st.none() | texts | st.integers(0, 3),
    "key": st.none() | texts,
    "headers": st.none() | st.dictionaries(texts, texts | st.integers(0, 1), max_size=4) | texts,
    "body": json_values | st.text(max_size=400),
    "body_base64": st.none() | st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode()) | texts,
    "content_type": st.none() | st.sampled_from(["", "text/plain", "application/json", "t" * 201]),
    "timestamp": st.none() | st.booleans() | st.integers(-1, 2**54) | st.floats(0, 10),
    "other": st.integers(),
}
any_messages = st.fixed_dictionaries({}, optional=any_fields)  # type: ignore[arg-type]
messages = clean_messages | any_messages
payloads = messages | st.fixed_dictionaries({"messages": st.lists(clean_messages, min_size=1, max_size=MAX_BATCH)}) \
    | st.fixed_dictionaries({"messages": st.lists(messages, max_size=MAX_BATCH + 1)})


def check(raw: bytes) -> None:
    fast = decode_publish(raw, LIMITS, MAX_BATCH)
    if fast is None:
        return
    try:
        slow = whole_way(raw)
    except BrokerError as exc:
        raise AssertionError(f"taken natively but refused the whole way ({exc}): {raw!r}") from None
    assert fast[1] == slow[1]
    objs = json.loads(raw)
    items = objs["messages"] if slow[1] else [objs]
    given_times = [isinstance(item, dict) and item.get("timestamp") is not None for item in items]
    assert [comparable(m, t) for m, t in zip(fast[0], given_times, strict=True)] == \
        [comparable(m, t) for m, t in zip(slow[0], given_times, strict=True)], raw


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, st.booleans())
@example({"messages": [{"key": "k", "body": "x" * 256, "content_type": "text/plain"}]}, False)
# String bodies under changing content types: each message's own type decides how its body is stored.
@example({"messages": [{"body": "a", "content_type": "text/plain"}, {"body": "b", "content_type": "application/json"},
                       {"body": "c"}, {"body": "d", "content_type": "text/plain"}]}, True)
# The first body an object, the others strings (and the reverse): either decoder may be tried first.
@example({"messages": [{"body": {"body": "x"}}, {"body": "y", "content_type": "text/plain"}]}, True)
@example({"messages": [{"body": "y", "content_type": "text/plain"}, {"body": [1]}]}, False)
# One past each limit that random examples rarely reach: an empty header name, one header too
# many, an empty or too long content type.
@example({"body": 1, "headers": {"": "v"}}, False)
@example({"body": 1, "headers": {"a": "", "b": "", "c": "", "d": ""}}, False)
@example({"body": 1, "content_type": ""}, False)
@example({"body": 1, "content_type": "t" * 201}, False)
def test_a_body_taken_natively_is_stored_as_the_whole_way_stores_it(payload: dict[str, Any], spaced: bool) -> None:
    raw = json.dumps(payload, ensure_ascii=spaced, separators=(", ", ": ") if spaced else (",", ":"))
    check(raw.encode("utf-8", "surrogatepass"))


def test_the_shapes_the_standard_library_must_judge_are_declined() -> None:
    deep = "[" * 130 + "]" * 130
    deeper = "[" * 100_000 + "]" * 100_000
    for raw in (f'{{"body": {deeper}}}'.encode(),
                b'{"body": "a\\u0000"}', b'{"body": 12345678901234567890123}', f'{{"body": {deep}}}'.encode(),
                b'{"body": 1e400}', b'{"body": NaN}', b'{"key": "\\ud800", "body": 1}', b'{"body": "\xff"}',
                b'{"body": 1} x', b'{"messages": []}', b'{"messages": [{"body": 1}], "more": 1}'):
        assert decode_publish(raw, LIMITS, MAX_BATCH) is None, raw


def test_plain_bodies_are_taken_natively() -> None:
    # Declining everything would pass the tests above; the common bodies must be taken.
    batch = {"messages": [{"key": "k", "body": "x" * 200, "content_type": "text/plain"},
                          {"id": "a1", "body": {"n": [1, 2.5, None]}, "headers": {"h": "v"}, "timestamp": 7},
                          {"body_base64": "AAE=", "content_type": "application/octet-stream"}]}
    taken = decode_publish(json.dumps(batch).encode(), LIMITS, MAX_BATCH)
    assert taken is not None and taken[1] is True
    assert [m.body for m in taken[0]] == [b"x" * 200, b'{"n":[1,2.5,null]}', b"\x00\x01"]
    single = decode_publish(b'{"body": {"a": 1}}', LIMITS, MAX_BATCH)
    assert single is not None and single[1] is False and single[0][0].content_type == "application/json"


def test_each_call_is_judged_by_the_limits_it_is_given() -> None:
    # The decoders of the limits used last are kept aside: limits taking turns must each be
    # applied, as equal limits in another object must be.
    wider = Limits(max_body=300, max_headers=3, max_header_name=5, max_header_value=8, max_id=20)
    raw = b'{"id": "a-long-id-12", "body": 1}'
    for _ in range(3):
        assert decode_publish(raw, LIMITS, MAX_BATCH) is None
        taken = decode_publish(raw, wider, MAX_BATCH)
        assert taken is not None and taken[0][0].id == "a-long-id-12"
        assert decode_publish(raw, Limits(**{**LIMITS.__dict__}), MAX_BATCH) is None
