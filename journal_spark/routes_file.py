"""The bridges' routes file: its keys, and parsing it into :class:`~journal_spark.routes.Routes`.

One model serves every kind of destination (a Kafka topic, a JMS queue or a JMS topic) and every
kind of ingress (a Kafka topic or a JMS destination into a broker topic)::

    bridge.id=edge-1
    routing.dead-letter.topic=jms-bridge-to-kafka-dead-letter-topic
    routing.on-error=dead-letter            # fail (default) | skip | dead-letter
    routing.start=earliest                  # a new checkpoint starts: earliest | latest | journaled
    kafka.bootstrap.servers=127.0.0.1:9092  # any kafka.<librdkafka property>
    jms.stomp.host=127.0.0.1                # the default JMS connection (JMS_KEYS)
    jms.connection.b.host=10.0.0.2          # a named JMS connection (journal_spark.jms.config)

    routes.foo-route.predicate=msg.address==foo-topic && msg.header.kind!=test
    routes.foo-route.dest.topic=foobar-topic          # or dest.jms.queue= / dest.jms.topic=
    routes.foo-route.conv.key=msg.header.CorrelationId
    routes.foo-route.non-persistent=drop              # bridge (default) | drop JMS NON_PERSISTENT
    routes.to-b.jms.connection=b                      # a JMS route's connection (default: jms.stomp.*)

    ingress.back.kafka.topic=replies                  # or ingress.<n>.jms.queue= / jms.topic=
    ingress.back.dest.topic=replies-in
    ingress.back.broker.url=http://127.0.0.1:8080

Routes are tried in the order their name first appears in the file; the first match wins. A
repeated key overrides the earlier value. Unknown keys, bad predicates and incomplete routes are
:class:`RoutesError`, naming the file and the line.

Extension point for the JMS bridge: add connection keys to :data:`JMS_KEYS`, per-route keys to
:data:`ROUTE_EXTRA_KEYS` and ingress parameters to :data:`INGRESS_OPTION_KEYS` (additive only);
they come back in ``Routes.settings``, ``Route.options`` and ``IngressRoute.options``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .predicates import parse_predicate
from .routes import (
    MARKER_TOPIC,
    MAX_HOPS,
    ON_ERROR_POLICIES,
    Destination,
    DestKind,
    IngressRoute,
    Route,
    Routes,
    RoutesError,
)

# Connection keys of the JMS bridge (the JMS helper may add more here).
JMS_KEYS: set[str] = {
    "jms.stomp.host", "jms.stomp.port", "jms.stomp.user", "jms.stomp.password", "jms.stomp.vhost",
    "jms.stomp.heartbeat.ms", "jms.stomp.ssl", "jms.stomp.ssl.ca.file", "jms.stomp.ssl.cert.file",
    "jms.stomp.ssl.key.file", "jms.stomp.detect.types", "jms.client.id",
    "jms.egress.chunk", "jms.egress.retries", "jms.egress.retry.ms", "jms.egress.management.port",
}
JMS_CONNECTION_PREFIX = "jms.connection."   # jms.connection.<name>.<key>, checked by journal_spark.jms.config
# Connection keys of NATS (JetStream destinations ``routes.<n>.dest.nats.subject``); the same keys as
# ``toymb bridge nats``, whose own ``nats-bridge.*`` entries may share the file.
NATS_KEYS: set[str] = {"nats.servers", "nats.user", "nats.password", "nats.token", "nats.reconnect.wait.ms",
                       "nats.reconnect.max"}
# Extra per-route keys (``routes.<n>.<key>``) besides the core ones.
ROUTE_EXTRA_KEYS: set[str] = {"jms.persistent", "jms.priority", "jms.ttl.ms", "jms.connection", "non-persistent"}
NON_PERSISTENT_CHOICES = ("bridge", "drop")
# Ingress parameters (``ingress.<n>.<key>``): the Artemis JMS bridge's names, and Kafka's.
INGRESS_OPTION_KEYS: set[str] = {
    "group.id", "batch.size", "batch.time.ms", "token",
    "selector", "qos", "max-batch-size", "max-batch-time", "failure-retry-interval", "max-retries",
    "subscription-name", "client-id", "add-message-id-in-header", "jms.connection", "non-persistent",
}
_GLOBAL_KEYS = {"bridge.id", "routing.dead-letter.topic", "routing.on-error", "routing.max-hops",
                "routing.markers.topic", "routing.start"}
START_POSITIONS = ("earliest", "latest", "journaled")
_ROUTE_CORE = {"name", "predicate", "dest.topic", "dest.jms.queue", "dest.jms.topic", "dest.nats.subject", "conv.key"}
_INGRESS_CORE = {"kafka.topic", "jms.queue", "jms.topic", "dest.topic", "broker.url"}
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")

_KINDS: dict[str, DestKind] = {
    "dest.topic": "kafka", "dest.jms.queue": "jms-queue", "dest.jms.topic": "jms-topic",
    "dest.nats.subject": "jetstream",
    "kafka.topic": "kafka", "jms.queue": "jms-queue", "jms.topic": "jms-topic",
}


def read_properties(path: str | os.PathLike[str]) -> list[tuple[int, str, str]]:
    """``(line, key, value)`` of a Java-style properties file (``=``/``:`` separators, ``#``/``!``
    comments, backslash continuation)."""
    entries: list[tuple[int, str, str]] = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        number, text = i + 1, lines[i].strip()
        i += 1
        while text.endswith("\\") and not text.endswith("\\\\") and i < len(lines):
            text = text[:-1] + lines[i].strip()
            i += 1
        if not text or text[0] in "#!":
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", text)
        if not m:
            raise RoutesError(f"{path}:{number}: expected key=value, got {text[:60]!r}")
        entries.append((number, m[1], m[2].strip()))
    return entries


def load_routes(path: str | os.PathLike[str]) -> Routes:
    """Parse and validate a routes file (see the module docstring)."""
    where = str(path)
    try:
        entries = read_properties(path)
    except OSError as exc:
        raise RoutesError(f"cannot read the routes file {where}: {exc}") from None
    glob: dict[str, tuple[int, str]] = {}
    per_route: dict[str, dict[str, tuple[int, str]]] = {}
    per_ingress: dict[str, dict[str, tuple[int, str]]] = {}
    for line, key, value in entries:
        def bad(msg: str, _line: int = line) -> RoutesError:
            return RoutesError(f"{where}:{_line}: {msg}")

        if (key in _GLOBAL_KEYS or key.startswith(("kafka.", JMS_CONNECTION_PREFIX)) or key in JMS_KEYS
                or key in NATS_KEYS):
            glob[key] = (line, value)
        elif key.startswith("nats-bridge."):
            continue      # the NATS bridge process's (nats_bridge.config); it checks them
        elif key.startswith(("routes.", "ingress.")):
            section, _, rest = key.partition(".")
            name, _, sub = rest.partition(".")
            if not _NAME.match(name) or not sub:
                raise bad(f"{key!r}: expected {section}.<name>.<key> with a name of letters, digits, - or _")
            allowed = ((_ROUTE_CORE | ROUTE_EXTRA_KEYS) if section == "routes"
                       else (_INGRESS_CORE | INGRESS_OPTION_KEYS))
            if sub not in allowed:
                raise bad(f"unknown key {key!r} (a {section} entry takes {', '.join(sorted(allowed))})")
            (per_route if section == "routes" else per_ingress).setdefault(name, {})[sub] = (line, value)
        else:
            raise bad(f"unknown key {key!r}")

    def get(key: str, default: str | None = None) -> str | None:
        return glob[key][1] if key in glob else default

    def gline(key: str) -> int:
        return glob[key][0] if key in glob else 0

    bridge_id = get("bridge.id", "toymb-bridge") or "toymb-bridge"
    on_error = get("routing.on-error", "fail") or "fail"
    if on_error not in ON_ERROR_POLICIES:
        raise RoutesError(f"{where}:{gline('routing.on-error')}: routing.on-error must be one of "
                          f"{', '.join(ON_ERROR_POLICIES)}, not {on_error!r}")
    dead_letter = get("routing.dead-letter.topic") or None
    if on_error == "dead-letter" and not dead_letter:
        raise RoutesError(f"{where}:{gline('routing.on-error')}: routing.on-error=dead-letter needs "
                          "routing.dead-letter.topic")
    try:
        max_hops = int(get("routing.max-hops", str(MAX_HOPS)) or MAX_HOPS)
        if max_hops < 1:
            raise ValueError
    except ValueError:
        raise RoutesError(f"{where}:{gline('routing.max-hops')}: routing.max-hops must be a positive "
                          "integer") from None

    start = get("routing.start", "earliest") or "earliest"
    if start not in START_POSITIONS:
        raise RoutesError(f"{where}:{gline('routing.start')}: routing.start must be one of "
                          f"{', '.join(START_POSITIONS)}, not {start!r}")
    routes = [_route(where, name, fields) for name, fields in per_route.items()]
    ingress = [_ingress(where, name, fields) for name, fields in per_ingress.items()]
    settings = {k: v for k, (_line, v) in glob.items() if k not in _GLOBAL_KEYS}
    return Routes(bridge_id, routes, ingress, dead_letter, on_error, max_hops,
                  get("routing.markers.topic", MARKER_TOPIC) or MARKER_TOPIC, settings, where, start)


def _route(where: str, name: str, fields: dict[str, tuple[int, str]]) -> Route:
    first = min(line for line, _ in fields.values())
    if "predicate" not in fields:
        raise RoutesError(f"{where}:{first}: route {name} has no routes.{name}.predicate")
    pline, ptext = fields["predicate"]
    try:
        predicate = parse_predicate(ptext)
    except ValueError as exc:
        raise RoutesError(f"{where}:{pline}: bad predicate of route {name}: {exc}") from None
    dests = [(k, v) for k, v in fields.items() if k.startswith("dest.")]
    if len(dests) != 1 or not dests[0][1][1]:
        raise RoutesError(f"{where}:{first}: route {name} needs exactly one of routes.{name}.dest.topic, "
                          f"dest.jms.queue, dest.jms.topic or dest.nats.subject")
    kind = _KINDS[dests[0][0]]
    conv_key = None
    if "conv.key" in fields:
        kline, conv_key = fields["conv.key"]
        if not (conv_key in ("msg.key", "msg.id")
                or (conv_key.startswith("msg.header.") and len(conv_key) > len("msg.header."))):
            raise RoutesError(f"{where}:{kline}: routes.{name}.conv.key must be msg.header.<name>, msg.key "
                              f"or msg.id, not {conv_key!r}")
    options = {k: v for k, (_l, v) in fields.items() if k in ROUTE_EXTRA_KEYS}
    _check_non_persistent(where, f"routes.{name}", fields)
    if "jms.connection" in fields and kind not in ("jms-queue", "jms-topic"):
        raise RoutesError(f"{where}:{fields['jms.connection'][0]}: routes.{name}.jms.connection is for a JMS "
                          "destination (dest.jms.queue or dest.jms.topic)")
    if "non-persistent" in fields and kind == "jetstream":
        raise RoutesError(f"{where}:{fields['non-persistent'][0]}: routes.{name}.non-persistent is for Kafka "
                          "and JMS destinations")
    display = fields["name"][1] if "name" in fields else name
    return Route(display, ptext, predicate, Destination(kind, dests[0][1][1]), conv_key, first, options)


def _ingress(where: str, name: str, fields: dict[str, tuple[int, str]]) -> IngressRoute:
    first = min(line for line, _ in fields.values())
    sources = [(k, v) for k, v in fields.items() if k in ("kafka.topic", "jms.queue", "jms.topic")]
    if len(sources) != 1 or not sources[0][1][1]:
        raise RoutesError(f"{where}:{first}: ingress {name} needs exactly one of ingress.{name}.kafka.topic, "
                          f"jms.queue or jms.topic")
    for required in ("dest.topic", "broker.url"):
        if not fields.get(required, (0, ""))[1]:
            raise RoutesError(f"{where}:{first}: ingress {name} has no ingress.{name}.{required}")
    kind = _KINDS[sources[0][0]]
    options = {k: v for k, (_l, v) in fields.items() if k in INGRESS_OPTION_KEYS}
    _check_non_persistent(where, f"ingress.{name}", fields)
    for jms_only in ("jms.connection", "non-persistent"):
        if jms_only in fields and kind not in ("jms-queue", "jms-topic"):
            raise RoutesError(f"{where}:{fields[jms_only][0]}: ingress.{name}.{jms_only} is for a JMS source "
                              "(jms.queue or jms.topic)")
    return IngressRoute(name, Destination(kind, sources[0][1][1]), fields["dest.topic"][1],
                        fields["broker.url"][1].rstrip("/"), first, options)


def _check_non_persistent(where: str, prefix: str, fields: dict[str, tuple[int, str]]) -> None:
    if "non-persistent" in fields and fields["non-persistent"][1] not in NON_PERSISTENT_CHOICES:
        line, value = fields["non-persistent"]
        raise RoutesError(f"{where}:{line}: {prefix}.non-persistent must be one of "
                          f"{', '.join(NON_PERSISTENT_CHOICES)}, not {value!r}")
