"""``@subscribe``, ``Message`` and the push dispatcher, without a node."""

from __future__ import annotations

import base64

import pytest

from driver import ConfigurationError, Message, PushDispatcher, SerializationError, subscribe
from driver.message import encode_body
from driver.subscribe import subscriptions_in, subscriptions_of


def envelope(offset: int, body: object = None, **extra: object) -> dict[str, object]:
    return {"id": f"m{offset}", "topic": "orders", "partition": 3, "offset": offset, "key": "k",
            "headers": {"h": "v"}, "timestamp": 1_700_000_000_000, "content_type": "application/json",
            "body": {"n": offset} if body is None else body, **extra}


def test_decorated_function_stays_directly_callable() -> None:
    seen: list[Message] = []

    @subscribe(topic="orders", group="billing")
    def handle(message: Message) -> str:
        seen.append(message)
        return "done"

    message = Message.from_envelope(envelope(0))
    assert handle(message) == "done"
    assert seen == [message]
    (sub,) = subscriptions_of(handle)
    assert (sub.topic, sub.group, sub.start) == ("orders", "billing", "latest")
    assert sub.handler() is handle


def test_decorated_class_keeps_consume_and_gets_one_instance() -> None:
    @subscribe(topic="orders", group="audit", start="earliest")
    class Audit:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def consume(self, message: Message) -> None:
            self.seen.append(message.offset)

    instance = Audit()  # still an ordinary class in a unit test
    instance.consume(Message.from_envelope(envelope(4)))
    assert instance.seen == [4]
    (sub,) = subscriptions_of(Audit)
    handler = sub.handler()
    handler(Message.from_envelope(envelope(5)))
    assert sub.handler().__self__ is handler.__self__  # type: ignore[attr-defined]
    assert handler.__self__.seen == [5]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kwargs", [
    {"topic": "bad topic", "group": "g"},
    {"topic": "t", "group": ""},
    {"topic": "t", "group": "g" * 201},
    {"topic": "t", "group": "g", "id": "has space"},
    # A trailing newline is not part of a name: a check with re.match and "$" would let these by.
    {"topic": "orders\n", "group": "g"},
    {"topic": "t", "group": "g\n"},
    {"topic": "t", "group": "g", "id": "abc\n"},
    {"topic": "t", "group": "g", "start": "middle"},
])
def test_bad_names_fail_at_decoration_time(kwargs: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        subscribe(**kwargs)  # type: ignore[arg-type]


def test_bad_handlers_fail_at_decoration_time() -> None:
    with pytest.raises(ConfigurationError, match="one message"):
        @subscribe(topic="t", group="g")
        def two(a: object, b: object) -> None: ...

    with pytest.raises(ConfigurationError, match="consume"):
        @subscribe(topic="t", group="g")
        class NoConsume:
            pass

    with pytest.raises(ConfigurationError, match="without arguments"):
        @subscribe(topic="t", group="g")
        class NeedsArgs:
            def __init__(self, db: object) -> None: ...

            def consume(self, message: Message) -> None: ...


def test_stable_id_is_derived_from_app_handler_and_group_and_can_be_given() -> None:
    @subscribe(topic="orders", group="billing")
    def handle(message: Message) -> None: ...

    @subscribe(topic="orders", group="billing", id="fixed-1")
    def fixed(message: Message) -> None: ...

    (sub,) = subscriptions_of(handle)
    first = sub.stable_id("shop")
    assert first == sub.stable_id("shop")
    assert first != sub.stable_id("other-app")
    assert first != sub.stable_id("shop", instance="2")
    assert "shop" in first and "billing" in first and "handle" in first
    assert subscriptions_of(fixed)[0].stable_id("shop") == "fixed-1"
    long = subscriptions_of(handle)[0].stable_id("a" * 300)
    assert len(long) <= 200


def test_one_handler_may_subscribe_twice_but_not_to_the_same_pair() -> None:
    @subscribe(topic="a", group="g")
    @subscribe(topic="b", group="g")
    def handle(message: Message) -> None: ...

    assert {s.topic for s in subscriptions_in(handle)} == {"a", "b"}
    with pytest.raises(ConfigurationError):
        subscribe(topic="a", group="g")(handle)


def test_message_body_is_decoded_by_content_type() -> None:
    assert Message.from_envelope(envelope(0, {"a": [1]})).body == {"a": [1]}
    text = Message.from_envelope(envelope(1, "hello", content_type="text/plain"))
    assert text.body == "hello" and text.content_type == "text/plain"
    raw = envelope(2)
    del raw["body"]
    raw.update(body_base64=base64.b64encode(b"\x00\xff").decode(), content_type="application/octet-stream")
    binary = Message.from_envelope(raw)
    assert binary.body == b"\x00\xff"
    assert binary.headers == {"h": "v"} and binary.key == "k" and binary.datetime.year == 2023
    with pytest.raises(ValueError):
        Message.from_envelope({"id": "x"})


def test_outgoing_bodies_are_encoded_by_python_type() -> None:
    assert encode_body({"a": 1}) == {"body": {"a": 1}, "content_type": "application/json"}
    assert encode_body("hi") == {"body": "hi", "content_type": "text/plain"}
    assert encode_body(b"\x01") == {"body_base64": "AQ==", "content_type": "application/octet-stream"}
    with pytest.raises(SerializationError):
        encode_body({1, 2})


def test_dispatcher_acks_nacks_and_skips_what_a_failed_batch_already_handled() -> None:
    calls: list[int] = []
    fail_once = {1}

    def handler(message: Message) -> None:
        calls.append(message.offset)
        if message.offset in fail_once:
            fail_once.discard(message.offset)
            raise RuntimeError("boom")

    dispatcher = PushDispatcher()
    dispatcher.add("sub-1", handler)
    push = {"subscriber_id": "sub-1", "topic": "orders", "group": "g",
            "messages": [envelope(0), envelope(1), envelope(2)]}
    status, body = dispatcher.handle(push)
    assert status == 500 and body["error"] == "handler_failed" and body["id"] == "m1"
    status, body = dispatcher.handle(push)  # the broker redelivers the whole batch
    assert status == 200
    assert calls == [0, 1, 1, 2]  # message 0 was not handled twice
    assert dispatcher.handle({**push, "subscriber_id": "nobody"})[0] == 404
    assert dispatcher.handle({"messages": "no"})[0] == 400
    assert dispatcher.handle({**push, "messages": [{"id": 1}]})[0] == 400
