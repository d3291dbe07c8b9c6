"""The ``Message`` a handler receives, and how outgoing bodies are encoded.

Bodies travel by type: ``bytes`` as ``body_base64`` (``application/octet-stream``), ``str`` as
text (``text/plain``), anything else as JSON (``application/json``). A received message's body is
decoded the same way back: JSON values, ``str`` for text types, ``bytes`` for the rest.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import SerializationError

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain"
BINARY_TYPE = "application/octet-stream"


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
                      content_type=str(envelope.get("content_type") or JSON_TYPE))
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
