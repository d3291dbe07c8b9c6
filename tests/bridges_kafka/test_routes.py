"""The routes file: order, predicates, keys, headers, and startup errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal_spark.errors import JournalError
from journal_spark.routes import HOPS_HEADER, ORIGIN_HEADER, VALID_KEYS, DataError, RoutesError, headers_for
from journal_spark.routes_file import load_routes

SEED_SHAPE = """\
# the seed's example, plus a JMS destination and an ingress
routing.dead-letter.topic=jms-bridge-to-kafka-dead-letter-topic
bridge.id=edge-1

routes.foo-route.name=foo-route
routes.foo-route.predicate=msg.address==foo-topic
routes.foo-route.dest.topic=foobar-topic
routes.foo-route.conv.key=msg.header.CorrelationId

routes.bar-route.name=bar-route
routes.bar-route.predicate=msg.address==bar-topic || msg.header.kind==bar && msg.header.env!="prod env"
routes.bar-route.dest.topic=foobar-topic
routes.bar-route.conv.key=msg.header.CorrelationId

routes.catch.predicate=(msg.address==foo-topic || msg.address==other)
routes.catch.dest.jms.queue=orders.q
routes.foo-route.dest.topic=overridden-topic

ingress.back.kafka.topic=replies
ingress.back.dest.topic=replies-in
ingress.back.broker.url=http://127.0.0.1:8080/
"""


def row(topic: str, headers: dict[str, str] | None = None, key: str | None = None, id: str = "m1") -> dict:
    return {"id": id, "topic": topic, "key": key, "headers": headers or {}, "content_type": "text/plain"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "routes.properties"
    path.write_text(text)
    return path


def test_seed_shape_parses_in_file_order_and_first_match_wins(tmp_path: Path) -> None:
    routes = load_routes(write(tmp_path, SEED_SHAPE))
    assert routes.bridge_id == "edge-1" and routes.on_error == "fail"
    assert routes.dead_letter_topic == "jms-bridge-to-kafka-dead-letter-topic"
    assert [r.name for r in routes.routes] == ["foo-route", "bar-route", "catch"]
    assert routes.routes[0].destination.name == "overridden-topic"     # a repeated key overrides
    assert routes.routes[2].destination.kind == "jms-queue"
    # foo-topic matches foo-route and catch: the first one in the file wins
    assert routes.first_match(row("foo-topic")).name == "foo-route"
    assert routes.first_match(row("other")).name == "catch"
    assert routes.first_match(row("nowhere")) is None
    # && binds tighter than ||
    assert routes.first_match(row("x", {"kind": "bar", "env": "dev"})).name == "bar-route"
    assert routes.first_match(row("x", {"kind": "bar", "env": "prod env"})) is None
    assert routes.first_match(row("x", {"kind": "bar"})).name == "bar-route"   # missing != v is true
    (ingress,) = routes.ingress
    assert (ingress.source.kind, ingress.source.name, ingress.dest_topic, ingress.broker_url) == (
        "kafka", "replies", "replies-in", "http://127.0.0.1:8080")


def test_keys_come_from_conv_key_or_the_message_id(tmp_path: Path) -> None:
    routes = load_routes(write(tmp_path, SEED_SHAPE))
    foo, _bar, catch = routes.routes
    assert foo.key_for(row("foo-topic", {"CorrelationId": "c-9"})) == "c-9"
    assert catch.key_for(row("other", id="abc")) == "abc"
    with pytest.raises(DataError) as info:
        foo.key_for(row("foo-topic"))
    assert info.value.reason == "no-key"


def test_bridged_headers_keep_jms_properties_and_count_hops() -> None:
    message = row("t", {"jms.JMSCorrelationID": "x", HOPS_HEADER: "1", ORIGIN_HEADER: "other"})
    headers = headers_for(message, "me")
    assert headers["jms.JMSCorrelationID"] == "x"
    assert headers[ORIGIN_HEADER] == "me" and headers[HOPS_HEADER] == "2"


@pytest.mark.parametrize(("text", "line", "message"), [
    ("bridge.id=x\nrouting.colour=red\n", 2, "unknown key 'routing.colour'"),
    ("routes.a.predicate=msg.address==x\nroutes.a.dest.topic=t\nroutes.a.dest.part=3\n", 3, "unknown key"),
    ("\n\nroutes.a.predicate=msg.address=x\nroutes.a.dest.topic=t\n", 3, "bad predicate"),
    ("routes.a.predicate=msg.topic==x\nroutes.a.dest.topic=t\n", 1, "bad predicate"),
    ("routes.a.predicate=msg.address==x &&\nroutes.a.dest.topic=t\n", 1, "bad predicate"),
    ("routes.a.predicate=(msg.address==x\nroutes.a.dest.topic=t\n", 1, "bad predicate"),
    ("routes.a.predicate=msg.address==x\n", 1, "needs exactly one"),
    ("routes.a.predicate=msg.address==x\nroutes.a.dest.topic=t\nroutes.a.conv.key=header.X\n", 3, "conv.key"),
    ("routing.on-error=retry\n", 1, "routing.on-error"),
    ("routing.on-error=dead-letter\n", 1, "routing.dead-letter.topic"),
    ("# comment\nthis line has no value\n", 2, "unknown key"),
])
def test_bad_files_are_startup_errors_naming_the_line(tmp_path: Path, text: str, line: int,
                                                      message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RoutesError, match=message) as info:
        load_routes(path)
    assert f"{path}:{line}:" in str(info.value)
    assert isinstance(info.value, JournalError)


@pytest.mark.parametrize(("headers", "found"), [
    ({"jms.CorrelationId": "seed"}, "seed"),
    ({"jms.JMSCorrelationID": "api"}, "api"),
    ({"jms.jmscorrelationid": "lower"}, "lower"),
    ({"CorrelationId": "plain"}, "plain"),
    ({"jms.JMSCorrelationID": "api", "jms.CorrelationId": "seed"}, "seed"),
    ({"jms.CorrelationIdX": "other field"}, None),
    ({}, None),
])
def test_seed_and_jms_api_spellings_of_a_header_field(headers: dict[str, str], found: str | None) -> None:
    from journal_spark.predicates import field_of

    row = {"id": "m", "topic": "t", "key": None, "headers": headers}
    assert field_of(row, "msg.header.CorrelationId") == found
    assert field_of(row, "msg.header.JMSCorrelationID") == found
    both = {**row, "headers": {"CorrelationId": "exact", "jms.CorrelationId": "jms"}}
    assert field_of(both, "msg.header.CorrelationId") == "exact"          # the exact name first


def test_a_property_is_found_with_or_without_its_jms_prefix() -> None:
    from journal_spark.predicates import parse_predicate

    predicate = parse_predicate("msg.header.color==red")
    assert predicate({"id": "m", "topic": "t", "key": None, "headers": {"jms.color": "red"}})
    assert predicate({"id": "m", "topic": "t", "key": None, "headers": {"color": "red", "jms.color": "blue"}})
    assert not predicate({"id": "m", "topic": "t", "key": None, "headers": {"jms.colour": "red"}})


@pytest.mark.parametrize(("headers", "system", "reason"), [
    ({}, "kafka", None),
    ({ORIGIN_HEADER: "me", "jmsbridge.path": "me@jms:default"}, "kafka", None),    # JMS -> Kafka: no loop
    ({ORIGIN_HEADER: "me", "jmsbridge.path": "me@kafka"}, "kafka", "cycle"),      # back where it came from
    ({ORIGIN_HEADER: "me", "jmsbridge.path": "me@jms:default,me@kafka"}, "jms:default", "cycle"),
    ({ORIGIN_HEADER: "me", "jmsbridge.path": "other@kafka"}, "kafka", None),      # another bridge's
    ({ORIGIN_HEADER: "me"}, "kafka", "cycle"),              # no path (older message): as before
    ({HOPS_HEADER: "4"}, "jms:b", "max-hops"),
])
def test_loops_are_only_real_loops(tmp_path: Path, headers: dict[str, str], system: str, reason: str | None) -> None:
    path = tmp_path / "r.properties"
    path.write_text("bridge.id=me\nroutes.r.predicate=msg.address==t\nroutes.r.dest.topic=x\n")
    assert load_routes(path).loop_reason(headers, system) == reason


def test_the_path_is_bounded() -> None:
    from journal_spark.routes import mark_arrival

    headers: dict[str, str] = {}
    for i in range(100):
        mark_arrival(headers, f"b{i}", "kafka")
    assert headers["jmsbridge.path"].count(",") == 15 and headers["jmsbridge.path"].endswith("b99@kafka")


@pytest.mark.parametrize("value", ["bad key", "x!", "-a", "a\x00b", "☃", "a" * 300, "c1\n"])
def test_a_key_that_is_not_alphanumeric_is_a_data_error(tmp_path: Path, value: str) -> None:
    path = tmp_path / "r.properties"
    path.write_text("routes.r.predicate=msg.address==t\nroutes.r.dest.topic=x\nroutes.r.conv.key=msg.header.k\n")
    (route,) = load_routes(path).routes
    with pytest.raises(DataError) as caught:
        route.key_for({"id": "m", "topic": "t", "key": None, "headers": {"k": value}})
    assert caught.value.reason == "bad-key"
    assert route.key_for({"id": "m", "topic": "t", "key": None, "headers": {"k": "ID:host-1:1:1"}}) == "ID:host-1:1:1"


def test_remembered_keys_stay_bounded_and_never_let_a_bad_key_through(tmp_path: Path) -> None:
    path = tmp_path / "r.properties"
    path.write_text("routes.r.predicate=msg.address==t\nroutes.r.dest.topic=x\nroutes.r.conv.key=msg.header.k\n")
    (route,) = load_routes(path).routes

    def key(value: str) -> str:
        return route.key_for({"id": "m", "topic": "t", "key": None, "headers": {"k": value}})

    for i in range(40_000):   # keys that never repeat: the set is cleared rather than grown
        assert key(f"k-{i}") == f"k-{i}"
        assert len(VALID_KEYS) <= 16_384
    assert key("k-39999") == "k-39999"     # remembered, and still the same key
    for bad in ("bad key", "k-1 ", "☃"):
        with pytest.raises(DataError):
            key(bad)
        assert bad not in VALID_KEYS


@pytest.mark.parametrize(("lines", "message"), [
    (["ingress.k.kafka.topic=t", "ingress.k.dest.topic=d", "ingress.k.broker.url=http://x",
      "ingress.k.non-persistent=drop"], "ingress.k.non-persistent is for a JMS source"),
    (["ingress.k.kafka.topic=t", "ingress.k.dest.topic=d", "ingress.k.broker.url=http://x",
      "ingress.k.jms.connection=b"], "ingress.k.jms.connection is for a JMS source"),
    (["routes.r.predicate=msg.address==a", "routes.r.dest.topic=x", "routes.r.jms.connection=b"],
     "routes.r.jms.connection is for a JMS destination"),
    (["routes.r.predicate=msg.address==a", "routes.r.dest.nats.subject=x", "routes.r.non-persistent=drop"],
     "routes.r.non-persistent is for Kafka and JMS destinations"),
])
def test_jms_only_settings_elsewhere_are_refused(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "r.properties"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RoutesError, match=message):
        load_routes(path)


PLANNED = """\
routes.vip.predicate=msg.address==shop && msg.header.tier==gold || msg.header.kind=="audit me"
routes.vip.dest.topic=audit
routes.not-test.predicate=msg.address^=shop && msg.address!=shop-test
routes.not-test.dest.topic=orders
routes.eu.predicate=(msg.address==eu || msg.address==eu-2) && msg.header.region!=us
routes.eu.dest.topic=eu
routes.catch.predicate=msg.address!=nowhere
routes.catch.dest.jms.queue=rest
"""


@pytest.mark.parametrize("topic", ["shop", "shop-1", "shop-test", "eu", "eu-2", "misc", "nowhere"])
def test_a_topic_plan_routes_every_message_as_first_match_does(tmp_path: Path, topic: str) -> None:
    from journal_spark.route_plan import plan_for_topic

    routes = load_routes(write(tmp_path, PLANNED))
    plan = plan_for_topic(routes, topic)
    for headers in ({}, {"tier": "gold"}, {"tier": "silver"}, {"kind": "audit me"}, {"region": "us"},
                    {"region": "eu", "tier": "gold"}, {"jms.kind": "audit me", "region": "us"}):
        message = row(topic, headers)
        assert plan.route(message) is routes.first_match(message), (topic, headers)


def test_a_topic_plan_tests_only_what_depends_on_the_message(tmp_path: Path) -> None:
    from journal_spark.route_plan import plan_for_topic

    routes = load_routes(write(tmp_path, PLANNED))
    by_name = {r.name: r for r in routes.routes}
    assert plan_for_topic(routes, "shop-1").tests == (by_name["vip"],)      # kind=="audit me" may hold
    assert plan_for_topic(routes, "shop-1").fallback is by_name["not-test"]
    assert plan_for_topic(routes, "nowhere").fallback is None
    address_only = load_routes(write(tmp_path, "routes.o.predicate=msg.address==orders\nroutes.o.dest.topic=t\n"))
    assert plan_for_topic(address_only, "orders").tests == ()               # nothing tested per message
    assert plan_for_topic(address_only, "other").fallback is None
