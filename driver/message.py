"""The ``Message`` a handler receives, and how outgoing bodies are encoded.

Bodies travel by type: ``bytes`` as ``body_base64`` (``application/octet-stream``), ``str`` as
text (``text/plain``), anything else as JSON (``application/json``). A received message's body is
decoded the same way back: JSON values, ``str`` for text types, ``bytes`` for the rest.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import SerializationError

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain"
BINARY_TYPE = "application/octet-stream"


class Settlement(Protocol):
    """What a pull consumer lets its messages do with themselves (see :meth:`Message.nack`)."""

    def nack(self, message: Message) -> None: ...
    def extend(self, message: Message, extend_ms: int) -> None: ...


@dataclass(frozen=True)
class Message:
    """One stored message, as a handler or a pull consumer sees it.

    ``body`` is decoded by content type: a JSON value for JSON types, ``str`` for text types and
    ``bytes`` for everything else.
    """

    id: str
    topic: str
    partition: int
    offset: int
    key: str | None
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    timestamp: int = 0
    content_type: str = JSON_TYPE
    #: Which delivery of this message this is, counted from 1 (more means a redelivery).
    delivery_attempt: int = 1
    _settlement: Settlement | None = field(default=None, compare=False, repr=False)

    def nack(self) -> None:
        """Give this pulled message back: the broker delivers it (and what follows it in its
        partition) again at once. It is not committed.

        Raises:
            RuntimeError: the message did not come from a :class:`~driver.pull.PullConsumer`.
        """
        self._settled().nack(self)

    def extend(self, extend_ms: int = 30_000) -> None:
        """Keep this pulled message from being redelivered for ``extend_ms`` from now, while it is
        still being worked on (at most 600,000 ms).

        Raises:
            RuntimeError: the message did not come from a :class:`~driver.pull.PullConsumer`.
        """
        self._settled().extend(self, extend_ms)

    def _settled(self) -> Settlement:
        if self._settlement is None:
            raise RuntimeError("nack() and extend() are for messages of a PullConsumer; "
                               "a push handler raises to have its message delivered again")
        return self._settlement

    def settled_by(self, settlement: Settlement) -> Message:
        """This message, with ``settlement`` answering its nack() and extend()."""
        return dataclasses.replace(self, _settlement=settlement)

    @property
    def datetime(self) -> _dt.datetime:
        """``timestamp`` (milliseconds since the epoch) as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.timestamp / 1000, tz=_dt.UTC)

    @classmethod
    def from_envelope(cls, envelope: Any) -> Message:
        """Build a message from the broker's JSON envelope.

        Raises:
            ValueError: the envelope lacks a field or has one of the wrong type.
        """
        if not isinstance(envelope, dict):
            raise ValueError("a message envelope must be a JSON object")
        try:
            if "body_base64" in envelope:
                body: Any = base64.b64decode(envelope["body_base64"], validate=True)
            else:
                body = envelope["body"]
            headers = envelope.get("headers") or {}
            msg = cls(id=str(envelope["id"]), topic=str(envelope["topic"]),
                      partition=_int(envelope["partition"]), offset=_int(envelope["offset"]),
                      key=None if envelope.get("key") is None else str(envelope["key"]),
                      body=body, headers={str(k): str(v) for k, v in dict(headers).items()},
                      timestamp=_int(envelope.get("timestamp", 0)),
                      content_type=str(envelope.get("content_type") or JSON_TYPE),
                      delivery_attempt=_int(envelope.get("delivery_attempt", 1)))
        except (KeyError, TypeError, binascii.Error) as exc:
            raise ValueError(f"not a message envelope: {exc!r}") from None
        return msg


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def encode_body(value: Any, content_type: str | None = None) -> dict[str, Any]:
    """The ``body``/``body_base64`` and ``content_type`` members for an outgoing message.

    Raises:
        SerializationError: ``value`` is of a type that cannot travel (checked again, fully,
            when the request is serialised).
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return {"body_base64": base64.b64encode(bytes(value)).decode("ascii"),
                "content_type": content_type or BINARY_TYPE}
    if isinstance(value, str):
        return {"body": value, "content_type": content_type or TEXT_TYPE}
    if isinstance(value, set | frozenset) or callable(value):
        raise SerializationError(f"a {type(value).__name__} cannot be sent as a message body; "
                                 "use a JSON-serialisable value, str or bytes")
    return {"body": value, "content_type": content_type or JSON_TYPE}
