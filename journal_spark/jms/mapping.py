"""How a broker message and a JMS message (as ActiveMQ shows it over STOMP) map onto each other.

Bodies
    A text body (``text/*``, JSON, XML content types, valid UTF-8 without NUL) is sent without a
    ``content-length`` header, which ActiveMQ turns into a ``TextMessage``; any other body is sent
    with ``content-length`` and becomes a ``BytesMessage``. Coming in, a frame with
    ``content-length`` (a ``BytesMessage``) gives a binary body, one without gives ``text/plain``.

JMS header fields (both ways; the seed's names, see :mod:`journal_spark.header_names`)
    ===================== ================== ==========================================
    broker header         STOMP header       JMS
    ===================== ================== ==========================================
    jms.CorrelationId     correlation-id     JMSCorrelationID
    jms.ReplyTo           reply-to           JMSReplyTo (``/queue/x`` or ``/topic/x``)
    jms.Type              type               JMSType
    jms.Priority          priority           JMSPriority (0-9)
    jms.Expiration        expires            JMSExpiration (ms since the epoch, 0: never)
    jms.DeliveryMode      persistent         PERSISTENT (default) / NON_PERSISTENT
    ===================== ================== ==========================================

    Going out, the JMS API's spellings (``jms.JMSCorrelationID`` ...) set the same fields (the
    seed's spelling wins when a message has both). Ingress also records ``jms.MessageId``,
    ``jms.Timestamp``, ``jms.Destination`` and ``jms.Redelivered``; those are set by the JMS
    server on send, so they never go back out. The message key goes out as ``JMSXGroupID``
    (ActiveMQ message groups keep a key's order, as a Kafka partition does) and comes back from
    it when the broker shows it.

Properties
    A header ``jms.<name>`` becomes the JMS property ``<name>``; any other header ``H`` becomes the
    property ``H``; coming in, property ``P`` becomes the header ``jms.P``. The bridge's own
    headers (origin, hop count, content type, ``ACTIVEMQ_BRIDGE_MSG_ID_LIST``) keep their names both ways, so
    loop prevention and the id list survive a JMS hop; Artemis's ``AMQ_BRIDGE_MSG_ID_LIST`` is read as
    the same list.

    JMS property names must be Java identifiers, so names are encoded with Apache Camel's
    convention, made reversible (``decode_name(encode_name(n)) == n`` for every ``n``):

    - ``.`` becomes ``_DOT_`` and ``-`` becomes ``_HYPHEN_``;
    - any other character that is not ASCII ``[A-Za-z0-9_$]`` becomes ``_U<hex code point>_``;
    - a ``_`` that would read as the start of one of those escapes becomes ``_U5F_``;
    - a name that is empty, starts with a digit, starts with ``JMS`` (reserved by the JMS spec)
      or is a selector keyword (``AND``, ``NULL``...) gets the prefix ``_X_``.

    A legal identifier without such sequences, e.g. ``color`` or ``my_prop``, is unchanged.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..header_names import ID_LIST_ALIASES, ID_LIST_HEADER, jms_field
from ..routes import CONTENT_TYPE_HEADER, HOPS_HEADER, ORIGIN_HEADER, PATH_HEADER

FIELD_TO_STOMP: dict[str, str] = {
    "CorrelationId": "correlation-id",
    "ReplyTo": "reply-to",
    "Type": "type",
    "Priority": "priority",
    "Expiration": "expires",
    "DeliveryMode": "persistent",
}
STOMP_TO_FIELD: dict[str, str] = {v: f"jms.{k}" for k, v in FIELD_TO_STOMP.items()}
INFO_FIELDS: dict[str, str] = {"message-id": "jms.MessageId", "timestamp": "jms.Timestamp",
                               "destination": "jms.Destination", "redelivered": "jms.Redelivered"}
_INFO = frozenset(h[4:] for h in INFO_FIELDS.values())
GROUP_HEADER = "JMSXGroupID"
# STOMP frame headers that are protocol, not JMS properties.
_FRAME_HEADERS = frozenset({"subscription", "ack", "content-length", "content-type", "browser", "receipt",
                            "transaction", "receipt-id", "transformation"}) | set(STOMP_TO_FIELD) | set(INFO_FIELDS)

_KEYWORDS = frozenset({"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"})
_ESCAPE = re.compile(r"_(?:DOT|HYPHEN|U[0-9A-F]{1,6}|X)_")
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789$")
_TEXT_TYPES = ("text/",)


@functools.lru_cache(maxsize=8192)   # per header of every bridged message; names repeat
def encode_name(name: str) -> str:
    """A legal JMS property name for the header name ``name`` (reversible, see the module doc)."""
    out: list[str] = []
    for i, ch in enumerate(name):
        if ch in _PLAIN:
            out.append(ch)
        elif ch == "_":
            out.append("_U5F_" if _ESCAPE.match(name, i) else "_")
        elif ch == ".":
            out.append("_DOT_")
        elif ch == "-":
            out.append("_HYPHEN_")
        else:
            out.append(f"_U{ord(ch):X}_")
    encoded = "".join(out)
    if not encoded or encoded[0].isdigit() or encoded.startswith("JMS") or encoded.upper() in _KEYWORDS:
        encoded = "_X_" + encoded
    return encoded


def _unescape(match: re.Match[str]) -> str:
    code = match.group(0)[1:-1]
    if code == "DOT":
        return "."
    if code == "HYPHEN":
        return "-"
    if code == "X":
        return match.group(0)   # only meaningful as a prefix, handled by decode_name
    point = int(code[1:], 16)
    return chr(point) if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF else match.group(0)


def decode_name(prop: str) -> str:
    """The header name a JMS property name stands for (inverse of :func:`encode_name`).

    Names that are not escapes are returned unchanged, so ``my_prop`` stays ``my_prop``.
    """
    if prop.startswith("_X_"):
        prop = prop[3:]
    return _ESCAPE.sub(_unescape, prop)


def is_text(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base.startswith(_TEXT_TYPES) or base in ("application/json", "application/xml") or \
        base.endswith(("+json", "+xml"))


@dataclass(slots=True)
class OutFrame:
    """One STOMP SEND: its body and headers (destination and transaction added by the sender)."""

    body: bytes
    headers: dict[str, str]
    text: bool


def _field_value(field: str, value: str) -> str | None:
    """A JMS header field's STOMP value, or None when the value is unusable (then it is skipped)."""
    if field == "DeliveryMode":
        upper = value.strip().upper()
        if upper in ("PERSISTENT", "2", "TRUE"):
            return "true"
        if upper in ("NON_PERSISTENT", "1", "FALSE"):
            return "false"
        return None
    if field == "Priority":
        return value if value.strip().isdigit() and 0 <= int(value) <= 9 else None
    if field == "Expiration":
        return value if value.strip().isdigit() else None
    if field == "ReplyTo":
        if value.startswith(("/queue/", "/topic/", "/temp-queue/", "/temp-topic/")):
            return value
        for scheme, prefix in (("queue://", "/queue/"), ("topic://", "/topic/")):
            if value.startswith(scheme):
                return prefix + value[len(scheme):]
        return "/queue/" + value if value else None
    return value


def to_stomp(key: str | None, headers: Mapping[str, str], content_type: str, body: bytes) -> OutFrame:
    """The STOMP SEND for a broker message (bridge headers already set in ``headers``)."""
    out: dict[str, str] = {"persistent": "true"}
    props: dict[str, str] = {}
    jms_props: dict[str, str] = {}
    fields: dict[str, tuple[bool, str]] = {}     # field -> (seed spelling?, value)
    for name, value in headers.items():
        field = jms_field(name)
        if field in FIELD_TO_STOMP:
            seed = name == f"jms.{field}"
            if seed or field not in fields or not fields[field][0]:
                fields[field] = (seed, value)
        elif field in _INFO:
            continue     # set by the JMS server on send; an ingress copy must not go back out
        elif name in ID_LIST_ALIASES:
            props.setdefault(ID_LIST_HEADER, value)
        elif name.startswith("jms."):
            jms_props[encode_name(name[4:])] = value
        else:
            props[encode_name(name)] = value
    for field, (_seed, value) in fields.items():
        converted = _field_value(field, value)
        if converted is not None:
            out[FIELD_TO_STOMP[field]] = converted
    props.update(jms_props)      # jms.<P> wins over a plain header of the same name
    if key is not None:
        props[GROUP_HEADER] = key
    for name, value in props.items():
        out.setdefault(name, value)
    text = False
    if is_text(content_type) and b"\x00" not in body:
        try:
            body.decode("utf-8")
            text = True
        except UnicodeDecodeError:
            text = False
    if not text:
        out["content-length"] = str(len(body))
    return OutFrame(body, out, text)


def from_stomp(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """A broker message (``{key, headers, content_type, body|body_base64}``) for a STOMP MESSAGE frame.

    The id is left to the caller: it depends on the ingress QoS.
    """
    import base64

    out_headers: dict[str, str] = {}
    bridge_own = {ORIGIN_HEADER, HOPS_HEADER, PATH_HEADER, ID_LIST_HEADER, CONTENT_TYPE_HEADER}
    for name, value in headers.items():
        if name in _FRAME_HEADERS or name == GROUP_HEADER:
            continue
        decoded = decode_name(name)
        if decoded in ID_LIST_ALIASES:        # Artemis's own spelling continues the same list
            decoded = ID_LIST_HEADER
            if decoded in out_headers:
                continue
        out_headers[decoded if decoded in bridge_own else f"jms.{decoded}"] = value
    for stomp_name, header in STOMP_TO_FIELD.items():
        field = headers.get(stomp_name)
        if field is None or (stomp_name == "expires" and field == "0"):
            continue
        if stomp_name == "persistent":
            field = "PERSISTENT" if field == "true" else "NON_PERSISTENT"
        out_headers[header] = field
    if "persistent" not in headers:
        out_headers["jms.DeliveryMode"] = "NON_PERSISTENT"
    for stomp_name, header in INFO_FIELDS.items():
        if stomp_name in headers:
            out_headers[header] = headers[stomp_name]
    message: dict[str, Any] = {"key": headers.get(GROUP_HEADER), "headers": out_headers}
    if "content-length" in headers:
        message["body_base64"] = base64.b64encode(body).decode("ascii")
        message["content_type"] = "application/octet-stream"
    else:
        message["body"] = body.decode("utf-8", errors="replace")
        message["content_type"] = "text/plain"
    return message


def append_id(existing: str | None, message_id: str) -> str:
    """``existing`` + ``,`` + ``message_id``, but never an id the list already holds (a resend)."""
    if not existing:
        return message_id
    if message_id in existing.split(","):
        return existing
    return f"{existing},{message_id}"

