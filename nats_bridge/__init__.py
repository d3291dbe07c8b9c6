"""The NATS bridge: request/reply and forwarding between NATS and JMS (ActiveMQ over STOMP).

- :mod:`nats_bridge.codec` — the seed ``003_…`` header protocol, version 1.0, byte-compatible with
  ``io.nats.bridge:nats-jms-bridge-message:1.0.4``;
- :mod:`nats_bridge.config` — the ``nats.*`` and ``nats-bridge.<name>.*`` keys of a routes file;
- :mod:`nats_bridge.bridge` — the long-running process (``toymb bridge nats --routes FILE``);
- :mod:`nats_bridge.metrics`, :mod:`nats_bridge.cli`.
"""

from __future__ import annotations

from .codec import BridgeMessage, Byte, DecodeError, EncodeError, Float32, Long, Short, decode, encode
from .errors import CodecError, NatsBridgeError, NatsConfigError

__all__ = [
    "BridgeMessage", "Byte", "CodecError", "DecodeError", "EncodeError", "Float32", "Long", "NatsBridgeError",
    "NatsConfigError", "Short", "decode", "encode",
]
