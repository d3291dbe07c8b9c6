"""The NATS bridge's exceptions, under one root::

    NatsBridgeError
    ├── NatsConfigError        a routes file the bridge refuses at startup (names the key)
    ├── CodecError             the header protocol
    │   ├── EncodeError        an input that version 1.0 cannot carry
    │   └── DecodeError        a corrupt frame (.reason: a short stable code, the metric's label)
    └── BridgeUnavailable      a side (NATS or JMS) is down; the bridge retries with backoff
        └── jms.ProtocolError  ActiveMQ sent something that is not STOMP
"""

from __future__ import annotations


class NatsBridgeError(Exception):
    """Root of the NATS bridge's errors."""


class NatsConfigError(NatsBridgeError):
    """An invalid or unsupported setting, found at startup; the message names the key."""


class CodecError(NatsBridgeError):
    """Root of the header protocol's errors."""


class EncodeError(CodecError):
    """The message cannot be written in version 1.0 without the reference decoding it differently."""


class DecodeError(CodecError):
    """A frame (a buffer starting with the ``AB CD`` marker) is corrupt.

    ``reason`` is one of :data:`nats_bridge.protocol.DECODE_REASONS`; ``offset`` is where reading failed.
    """

    def __init__(self, reason: str, message: str, offset: int = 0) -> None:
        super().__init__(f"{message} (at byte {offset})")
        self.reason = reason
        self.offset = offset


class BridgeUnavailable(NatsBridgeError):
    """NATS or ActiveMQ cannot be reached right now."""
