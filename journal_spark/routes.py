"""The bridges' routes file (seed ``000_…`` shape): parsing, predicates, keys and bridged headers.

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

Loop prevention: every bridged message carries ``jmsbridge.origin`` (the bridge that moved it
last), ``jmsbridge.hops`` and ``jmsbridge.path``: one ``<bridge.id>@<system>`` entry per ingress it
came in through, the system being ``kafka`` or ``jms:<connection>``. An egress drops a message as
a cycle only when it would go back to a system this bridge brought it in from
(:meth:`Routes.loop_reason`), or after ``routing.max-hops`` bridges. So with one ``bridge.id`` for
a JMS ingress and a Kafka egress, a JMS message reaches Kafka, and a Kafka message that came in is
not sent back to Kafka. A message with this bridge's origin but no path (written before the path
existed) counts as a cycle. Every drop is counted and logged.

Predicates: ``msg.address`` (the broker topic), ``msg.key``, ``msg.id`` and ``msg.header.<H>``,
compared with ``==`` or ``!=`` to a bare word or a quoted string, combined with ``&&`` (binds
tighter) and ``||``, with optional parentheses. A missing header or key equals nothing: ``==`` is
false and ``!=`` is true. ``msg.header.H`` also finds ``jms.H``, and a JMS header field by the
seed's or the JMS API's name (:mod:`journal_spark.header_names`).

Rows are anything indexable by envelope column name (a pyspark ``Row``, a dict): ``id``,
``topic``, ``key``, ``headers`` (a dict, a list of pairs, or None).

Extension point for the JMS bridge: add connection keys to :data:`JMS_KEYS`, per-route keys to
:data:`ROUTE_EXTRA_KEYS` and ingress parameters to :data:`INGRESS_OPTION_KEYS` (additive only);
they come back in ``Routes.settings``, ``Route.options`` and ``IngressRoute.options``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import JournalError
from .header_names import header_candidates
from .predicates import AllOf, AnyOf, Compare, Predicate, field_getter, parse_predicate, row_headers

__all__ = [
    "CONTENT_TYPE_HEADER", "HOPS_HEADER", "MARKER_TOPIC", "MAX_HOPS", "ORIGIN_HEADER", "ON_ERROR_POLICIES",
    "PATH_HEADER", "mark_arrival",
    "AllOf", "AnyOf", "BridgeError", "Compare", "DataError", "Destination", "HardFailure", "IngressRoute",
    "Predicate", "Route", "Routes", "RoutesError", "headers_for", "hops_of", "load_routes", "parse_predicate",
    "row_headers",
]

ORIGIN_HEADER = "jmsbridge.origin"
HOPS_HEADER = "jmsbridge.hops"
PATH_HEADER = "jmsbridge.path"
"""Where a message came in: ``<bridge.id>@<system>`` entries, comma-separated, oldest first."""
MAX_PATH_ENTRIES = 16
CONTENT_TYPE_HEADER = "toymb.content_type"
MAX_HOPS = 4
"""A message that has crossed this many bridges is not bridged again (chains of distinct bridges)."""
ON_ERROR_POLICIES = ("fail", "skip", "dead-letter")
MARKER_TOPIC = "_toymb_bridge_markers"
KEY_PATTERN = re.compile(r"[^\W_]([\w.:-]{0,254}[^\W_])?")
"""A key taken by ``conv.key`` (seed ``000_…``: "key value isn't alphanumeric" is a soft failure): up to
256 letters and digits (any script), with ``-``, ``_``, ``.`` or ``:`` allowed between them, as ids
and correlation ids carry (``order-17``, ``ID:host-1:1:1``). Spaces, punctuation, control
characters and symbols are not."""

_is_key = KEY_PATTERN.fullmatch
# Keys that passed KEY_PATTERN. A conv.key's values repeat (an entity's id, a conversation's
# correlation id), and the pattern costs about as much as producing the record to Kafka (0.5 us of
# an egress record's ~1.5 us of Python, measured): a key seen before is a set lookup. Only valid
# keys go in, so a hit is what the pattern would say; cleared when full, so memory stays bounded
# and keys that never repeat cost one miss and one add each.
VALID_KEYS: set[str] = set()
_VALID_KEYS_MAX = 16_384

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

DestKind = Literal["kafka", "jms-queue", "jms-topic", "jetstream"]
_KINDS: dict[str, DestKind] = {
    "dest.topic": "kafka", "dest.jms.queue": "jms-queue", "dest.jms.topic": "jms-topic",
    "dest.nats.subject": "jetstream",
    "kafka.topic": "kafka", "jms.queue": "jms-queue", "jms.topic": "jms-topic",
}


class RoutesError(JournalError):
    """The routes file is wrong (unknown key, bad predicate, incomplete route); names the line."""


class BridgeError(JournalError):
    """Root of the errors a bridge raises while running."""


class HardFailure(BridgeError):
    """The bridge cannot go on: a missing destination, a refused write, a failed dead-letter."""


class DataError(BridgeError):
    """One message cannot be bridged (no key, unconvertible); handled by ``routing.on-error``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason   # a short stable code, put in dead-letter headers


# ---------------------------------------------------------------------------------- model
@dataclass(frozen=True)
class Destination:
    kind: DestKind
    name: str


@dataclass
class Route:
    """One egress route: a predicate, a destination and how to pick the key."""

    name: str
    predicate_text: str
    predicate: Predicate
    destination: Destination
    conv_key: str | None = None          # msg.header.X | msg.key | msg.id; None: the message id
    line: int = 0
    options: dict[str, str] = field(default_factory=dict)
    # conv.key's lookup, resolved once: key_for runs for every bridged message.
    _key_of: Callable[[Any], str | None] | None = field(init=False, repr=False, compare=False)
    #: The header names a ``msg.header.<H>`` conv.key looks up first, in order (else empty): a value
    #: found under one of them in a dict of headers, and in :data:`VALID_KEYS`, is what key_for returns.
    key_headers: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._key_of = field_getter(self.conv_key) if self.conv_key is not None else None
        conv_key = self.conv_key or ""
        self.key_headers = (header_candidates(conv_key[len("msg.header."):])
                            if conv_key.startswith("msg.header.") else ())

    def matches(self, row: Any) -> bool:
        return self.predicate(row)

    def key_for(self, row: Any) -> str:
        """The record key (seed ``000_…``: from ``conv.key``, else the message id).

        Raises:
            DataError: reason ``no-key`` when ``conv.key`` finds nothing, ``bad-key`` when its value
                is not alphanumeric (:data:`KEY_PATTERN`).
        """
        if self._key_of is None:
            return str(row["id"])
        value = self._key_of(row)
        if value is not None and value in VALID_KEYS:
            return value
        return self.new_key(value, row)

    def new_key(self, value: str | None, row: Any) -> str:
        """``value``, what ``conv.key`` finds in ``row`` and not yet known valid, checked as
        :meth:`key_for` checks it, and remembered in :data:`VALID_KEYS` if valid.

        Raises:
            DataError: as :meth:`key_for`.
        """
        if value is None or value == "":
            raise DataError("no-key",
                            f"message {row['id']} has no {self.conv_key} for the key of route {self.name}")
        if not _is_key(value):
            raise DataError("bad-key", f"message {row['id']}: {self.conv_key}={value[:80]!r} is not an "
                                       f"alphanumeric key (route {self.name})")
        if len(VALID_KEYS) >= _VALID_KEYS_MAX:
            VALID_KEYS.clear()
        VALID_KEYS.add(value)
        return value


@dataclass
class IngressRoute:
    """One ingress: a Kafka topic (or JMS destination) into a broker topic over HTTP."""

    name: str
    source: Destination
    dest_topic: str
    broker_url: str
    line: int = 0
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class Routes:
    """A parsed routes file."""

    bridge_id: str
    routes: list[Route]
    ingress: list[IngressRoute]
    dead_letter_topic: str | None = None
    on_error: str = "fail"
    max_hops: int = MAX_HOPS
    marker_topic: str = MARKER_TOPIC
    settings: dict[str, str] = field(default_factory=dict)   # kafka.* and jms.* connection keys
    path: str = ""
    start: str = "earliest"     # where a bridge with a brand-new checkpoint begins in the store

    def first_match(self, row: Any) -> Route | None:
        """The first route (file order) whose predicate holds for ``row``, or None."""
        for route in self.routes:
            if route.predicate(row):
                return route
        return None

    def of_kind(self, *kinds: str) -> list[Route]:
        return [r for r in self.routes if r.destination.kind in kinds]

    def kafka_config(self) -> dict[str, str]:
        """librdkafka properties from the ``kafka.*`` keys (bootstrap defaults to 127.0.0.1:9092)."""
        conf = {k[len("kafka."):]: v for k, v in self.settings.items() if k.startswith("kafka.")}
        conf.setdefault("bootstrap.servers", "127.0.0.1:9092")
        return conf

    def loop_reason(self, headers: Mapping[str, str], system: str) -> str | None:
        """Why a message must not be bridged to ``system`` (``kafka``, ``jms:<connection>``), or None.

        ``"cycle"``: this bridge brought it in from that same system. ``"max-hops"``: it crossed
        ``routing.max-hops`` bridges. A garbled hop count is a :class:`DataError`.
        """
        if hops_of(headers) >= self.max_hops:
            return "max-hops"
        path = headers.get(PATH_HEADER)
        if path is None:
            return "cycle" if headers.get(ORIGIN_HEADER) == self.bridge_id else None
        return "cycle" if f"{self.bridge_id}@{system}" in path.split(",") else None


def hops_of(headers: Mapping[str, str]) -> int:
    """The hop count a message carries (0 if none); a garbled count is a :class:`DataError`."""
    raw = headers.get(HOPS_HEADER)
    if raw is None:
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        raise DataError("bad-hops", f"header {HOPS_HEADER}={raw!r} is not a number") from None


def mark_arrival(headers: dict[str, str], bridge_id: str, system: str) -> None:
    """Record in ``headers`` that ``bridge_id`` brought the message in from ``system`` (an ingress)."""
    headers[ORIGIN_HEADER] = bridge_id
    entries = [e for e in headers.get(PATH_HEADER, "").split(",") if e]
    entries.append(f"{bridge_id}@{system}")
    headers[PATH_HEADER] = ",".join(entries[-MAX_PATH_ENTRIES:])


def headers_for(row: Any, bridge_id: str) -> dict[str, str]:
    """The headers of a bridged record: the message's own (``jms.*`` untouched), this bridge as
    origin, the hop count plus one, and the content type so the way back can restore it."""
    headers = row_headers(row)
    hops = hops_of(headers)
    headers[ORIGIN_HEADER] = bridge_id
    headers[HOPS_HEADER] = str(hops + 1)
    content_type = row["content_type"] if _has(row, "content_type") else None
    if content_type:
        headers[CONTENT_TYPE_HEADER] = content_type
    return headers


def _has(row: Any, name: str) -> bool:
    try:
        row[name]
    except (KeyError, ValueError, IndexError):
        return False
    return True


# -------------------------------------------------------------------------------- parsing
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


def is_non_persistent(headers: Mapping[str, str]) -> bool:
    """True for a JMS NON_PERSISTENT message (``jms.DeliveryMode``, or the JMS API's spelling)."""
    from .header_names import find_header

    mode = find_header(headers, "DeliveryMode")
    return mode is not None and mode.strip().upper() in ("NON_PERSISTENT", "1", "FALSE")
