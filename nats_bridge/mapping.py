"""How a message crosses: a STOMP frame (JMS as ActiveMQ shows it) or a NATS message <-> :class:`BridgeMessage`.

JMS side (both ways)
    ==================== ============== ==================================
    BridgeMessage        STOMP header   JMS
    ==================== ============== ==================================
    correlation_id       correlation-id JMSCorrelationID
    type                 type           JMSType
    priority             priority       JMSPriority
    expiration_time      expires        JMSExpiration (ms, 0: never)
    mode                 persistent     JMSDeliveryMode (2 PERSISTENT, 1 NON_PERSISTENT)
    timestamp            timestamp      JMSTimestamp (from JMS only: ActiveMQ sets it)
    redelivered          redelivered    JMSRedelivered (from JMS only)
    headers[n]           <encoded n>    a String property (STOMP carries strings only)
    ==================== ============== ==================================

    Property names use the JMS bridge's reversible Camel encoding (``.`` -> ``_DOT_``...,
    :func:`journal_spark.jms.mapping.encode_name`). A body that is UTF-8 text goes as a TextMessage,
    any other as a BytesMessage.

NATS side, by the bridge's ``headers`` setting
    ``codec``: the payload is a header-protocol 1.0 frame (the raw body when there is nothing else);
    ``nats``: NATS message headers, the metadata under the ``BRIDGE_*`` names; ``none``: the body only.
"""

from __future__ import annotations

from collections.abc import Mapping

from journal_spark.jms.mapping import decode_name, encode_name

from .codec import decode, encode
from .errors import DecodeError
from .protocol import (
    HEADER_KEY_CORRELATION_ID,
    HEADER_KEY_DELIVERY_TIME,
    HEADER_KEY_EXPIRATION_TIME,
    HEADER_KEY_MODE,
    HEADER_KEY_PRIORITY,
    HEADER_KEY_REDELIVERED,
    HEADER_KEY_TIMESTAMP,
    HEADER_KEY_TYPE,
    BridgeMessage,
    HeaderValue,
)

# STOMP headers that are protocol or JMS header fields, never properties.
PROTOCOL_HEADERS = frozenset({
    "subscription", "ack", "content-length", "content-type", "receipt", "receipt-id", "transaction", "destination",
    "message-id", "reply-to", "correlation-id", "type", "priority", "expires", "persistent", "timestamp",
    "redelivered", "original-destination", "JMSXGroupID", "JMSXGroupSeq", "JMSXDeliveryCount",
    "JMSXUserID", "JMSXProducerTXID", "JMSXRcvTimestamp", "JMSXState",
})
ERROR_PROPERTY = "nats_bridge_error"
ERROR_CODE_PROPERTY = "nats_bridge_error_code"
NATS_ERROR = "Nats-Service-Error"            # the NATS micro services' names for an error reply
NATS_ERROR_CODE = "Nats-Service-Error-Code"


def _text(value: HeaderValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_text(body: bytes) -> bool:
    if b"\x00" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def to_stomp(message: BridgeMessage) -> dict[str, str]:
    """The STOMP SEND headers of ``message`` (without destination and reply-to)."""
    headers: dict[str, str] = {}
    for name, value in message.headers.items():
        prop = encode_name(name)
        if prop in PROTOCOL_HEADERS:
            prop = "_X_" + prop   # decode_name strips the prefix again
        headers[prop] = _text(value)
    if message.correlation_id is not None:
        headers["correlation-id"] = message.correlation_id
    if message.type is not None:
        headers["type"] = message.type
    if message.priority is not None and 0 <= message.priority <= 9:
        headers["priority"] = str(message.priority)
    if message.expiration_time is not None:
        headers["expires"] = str(message.expiration_time)
    if message.mode in (1, 2):
        headers["persistent"] = "true" if message.mode == 2 else "false"
    if not _is_text(message.body):
        headers["content-length"] = str(len(message.body))
    return headers


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def from_stomp(headers: Mapping[str, str], body: bytes) -> BridgeMessage:
    """The :class:`BridgeMessage` of a received STOMP MESSAGE frame."""
    props: dict[str, HeaderValue] = {decode_name(k): v for k, v in headers.items() if k not in PROTOCOL_HEADERS}
    props.pop(ERROR_PROPERTY, None)
    props.pop(ERROR_CODE_PROPERTY, None)
    expires = _int(headers.get("expires"))
    timestamp = _int(headers.get("timestamp"))
    priority = _int(headers.get("priority"))
    return BridgeMessage(
        body=body, headers=props, correlation_id=headers.get("correlation-id") or None,
        type=headers.get("type") or None, priority=priority if priority is not None and 0 <= priority <= 9 else None,
        expiration_time=expires if expires and expires > 0 else None,
        timestamp=timestamp if timestamp and timestamp > 0 else None,
        mode=None if "persistent" not in headers else (2 if headers["persistent"] == "true" else 1),
        redelivered=headers.get("redelivered") == "true")


_FIELD_NAMES = {
    HEADER_KEY_CORRELATION_ID: "correlation_id", HEADER_KEY_TYPE: "type", HEADER_KEY_PRIORITY: "priority",
    HEADER_KEY_EXPIRATION_TIME: "expiration_time", HEADER_KEY_DELIVERY_TIME: "delivery_time",
    HEADER_KEY_TIMESTAMP: "timestamp", HEADER_KEY_MODE: "mode", HEADER_KEY_REDELIVERED: "redelivered",
}


def to_nats(message: BridgeMessage, mode: str) -> tuple[bytes, dict[str, str] | None]:
    """The NATS payload and headers of ``message`` in header mode ``mode`` (codec | nats | none).

    Raises:
        EncodeError: ``codec`` mode, and the message holds what version 1.0 cannot carry.
    """
    if mode == "codec":
        return encode(message), None
    if mode == "none":
        return message.body, None
    headers = {name: _text(value) for name, value in message.headers.items() if name not in _FIELD_NAMES}
    for key, attr in _FIELD_NAMES.items():
        value = getattr(message, attr)
        if value is not None and value is not False:
            headers[key] = _text(value)
    return message.body, headers or None


def from_nats(payload: bytes, headers: Mapping[str, str] | None, mode: str) -> BridgeMessage:
    """The :class:`BridgeMessage` of a NATS message in header mode ``mode``.

    Raises:
        DecodeError: ``codec`` mode and a corrupt frame.
    """
    if mode == "codec":
        return decode(payload)
    if mode == "none" or not headers:
        return BridgeMessage(body=payload, framed=False)
    user: dict[str, HeaderValue] = {}
    fields: dict[str, object] = {}
    for name, value in headers.items():
        attr = _FIELD_NAMES.get(name)
        if attr is None:
            if name not in (NATS_ERROR, NATS_ERROR_CODE, "Nats-Msg-Id"):
                user[name] = value
        elif attr in ("correlation_id", "type"):
            fields[attr] = value or None
        elif attr == "redelivered":
            fields[attr] = value == "true"
        else:
            number = _int(value)
            if number is None:
                raise DecodeError("bad_common_header", f"NATS header {name} is not an integer: {value[:40]!r}")
            fields[attr] = number
    return BridgeMessage(body=payload, headers=user, **fields)  # type: ignore[arg-type]
