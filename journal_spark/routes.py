"""The bridges' routes (seed ``000_…``): the model, predicates, keys and bridged headers.

The routes file and its parsing are :mod:`journal_spark.routes_file`.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import JournalError
from .header_names import header_candidates
from .predicates import AllOf, AnyOf, Compare, Predicate, field_getter, parse_predicate, row_headers

__all__ = [
    "CONTENT_TYPE_HEADER", "HOPS_HEADER", "MARKER_TOPIC", "MAX_HOPS", "ORIGIN_HEADER", "ON_ERROR_POLICIES",
    "PATH_HEADER", "mark_arrival",
    "AllOf", "AnyOf", "BridgeError", "Compare", "DataError", "Destination", "HardFailure", "IngressRoute",
    "Predicate", "Route", "Routes", "RoutesError", "headers_for", "hops_of", "parse_predicate",
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


DestKind = Literal["kafka", "jms-queue", "jms-topic", "jetstream"]


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

    def key_from(self, headers: Mapping[str, Any], row: Any) -> str:
        """:meth:`key_for` with the row's ``headers`` at hand as a mapping (a bridge's hot loop): a
        ``msg.header.<H>`` conv.key's value is looked up there, two calls less than key_for, and is
        what key_for's lookup finds (the value under the first of :attr:`key_headers` present).

        Raises:
            DataError: as :meth:`key_for`.
        """
        for name in self.key_headers:
            if name in headers:
                value = headers[name]
                return value if value in VALID_KEYS else self.new_key(value, row)
        return self.key_for(row)    # not a header conv.key, or absent under these names

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


def is_non_persistent(headers: Mapping[str, str]) -> bool:
    """True for a JMS NON_PERSISTENT message (``jms.DeliveryMode``, or the JMS API's spelling)."""
    from .header_names import find_header

    mode = find_header(headers, "DeliveryMode")
    return mode is not None and mode.strip().upper() in ("NON_PERSISTENT", "1", "FALSE")
