"""The names of JMS header fields in broker headers: the seed's spelling first, the JMS API's as alias.

Seed ``000_…`` converts every JMS header to ``jms.<name>`` with ``MessageId -> jms.MessageId`` as
its example, and routes on ``msg.header.CorrelationId``. So a message that came in from JMS
carries ``jms.MessageId``, ``jms.CorrelationId``, ``jms.Type``, ``jms.Priority``,
``jms.Timestamp``, ``jms.Expiration``, ``jms.DeliveryMode``, ``jms.ReplyTo``,
``jms.Destination`` and ``jms.Redelivered``; its JMS properties are ``jms.<property>``.

Everywhere a header is *read* (predicates, ``conv.key``, the JMS egress), the JMS API's names
(``JMSCorrelationID``, ``JMSMessageID`` ...) are accepted for the same fields, case-insensitively,
with or without the ``jms.`` prefix: ``msg.header.CorrelationId`` finds ``jms.CorrelationId`` or
``jms.JMSCorrelationID``, and ``msg.header.color`` finds ``color`` or else ``jms.color``.

The message-id list of the Artemis JMS bridge is ``ACTIVEMQ_BRIDGE_MSG_ID_LIST`` (seed ``001_…``);
Artemis itself writes ``AMQ_BRIDGE_MSG_ID_LIST``, which is accepted on input so a message that
went through a real Artemis bridge continues its list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

__all__ = ["FIELDS", "ID_LIST_ALIASES", "ID_LIST_HEADER", "JMS_API_NAME", "field_of_name", "find_header",
           "header_candidates", "header_finder", "jms_field"]

FIELDS = ("MessageId", "CorrelationId", "Type", "Priority", "Timestamp", "Expiration", "DeliveryMode",
          "ReplyTo", "Destination", "Redelivered")
"""The JMS header fields, as the seed spells them (``jms.<field>`` in broker headers)."""

JMS_API_NAME = {"MessageId": "JMSMessageID", "CorrelationId": "JMSCorrelationID", "Type": "JMSType",
                "Priority": "JMSPriority", "Timestamp": "JMSTimestamp", "Expiration": "JMSExpiration",
                "DeliveryMode": "JMSDeliveryMode", "ReplyTo": "JMSReplyTo", "Destination": "JMSDestination",
                "Redelivered": "JMSRedelivered"}

ID_LIST_HEADER = "ACTIVEMQ_BRIDGE_MSG_ID_LIST"
ID_LIST_ALIASES = ("AMQ_BRIDGE_MSG_ID_LIST",)

_BY_LOWER = {**{f.lower(): f for f in FIELDS}, **{api.lower(): f for f, api in JMS_API_NAME.items()}}


@functools.lru_cache(maxsize=4096)   # bridges ask per message, for a handful of names
def field_of_name(name: str) -> str | None:
    """The seed's field name (``CorrelationId``) for any spelling of a JMS header field, else None.

    ``CorrelationId``, ``JMSCorrelationID``, ``jms.CorrelationId`` and ``jms.jmscorrelationid``
    all give ``CorrelationId``.
    """
    bare = name[4:] if name[:4].lower() == "jms." else name
    return _BY_LOWER.get(bare.lower())


def jms_field(header: str) -> str | None:
    """The field a broker header stands for, only for the ``jms.``-prefixed spellings."""
    return field_of_name(header) if header[:4].lower() == "jms." else None


@functools.lru_cache(maxsize=4096)
def header_candidates(name: str) -> tuple[str, ...]:
    """The header names ``msg.header.<name>`` looks for, in order (the exact name first)."""
    field = field_of_name(name)
    if field is None:
        return (name,) if name.startswith("jms.") else (name, f"jms.{name}")
    api = JMS_API_NAME[field]
    return tuple(dict.fromkeys((name, f"jms.{field}", f"jms.{api}", field, api)))


def find_header(headers: Mapping[str, str], name: str) -> str | None:
    """The value of ``msg.header.<name>`` in ``headers`` (see :func:`header_candidates`); None if absent.

    The JMS fields are also matched case-insensitively, so ``jms.correlationid`` is found too.
    """
    return header_finder(name)(headers)


@functools.lru_cache(maxsize=4096)
def header_finder(name: str) -> Callable[[Mapping[str, str]], str | None]:
    """:func:`find_header` for one ``name``, its candidates worked out once (the bridges' hot loop
    looks up the same few names for every message)."""
    candidates, field = header_candidates(name), field_of_name(name)

    def find(headers: Mapping[str, str]) -> str | None:
        for candidate in candidates:
            if candidate in headers:
                return headers[candidate]
        if field is not None:
            for key, value in headers.items():
                if key[:4].lower() == "jms." and field_of_name(key) == field:
                    return value
        return None

    return find
