"""The NATS bridge: NATS <-> JMS (ActiveMQ over STOMP) request/reply and forwarding, and JetStream ends.

- :mod:`~nats_bridge.codec` — the seed ``003_…`` header protocol, version 1.0, byte-compatible with
  ``io.nats.bridge:nats-jms-bridge-message:1.0.4``; :mod:`~nats_bridge.protocol`, its constants and types;
- :mod:`~nats_bridge.config` (routes-file keys) and :mod:`~nats_bridge.yaml_config` (nats-jms-bridge's YAML);
- :mod:`~nats_bridge.jms` (STOMP on asyncio), :mod:`~nats_bridge.mapping` (what crosses, and how);
- :mod:`~nats_bridge.bridge` (request/reply), :mod:`~nats_bridge.pending` (timeouts, the in-flight cap),
  :mod:`~nats_bridge.forward`, :mod:`~nats_bridge.ingress` (JetStream -> broker topic);
- :mod:`~nats_bridge.runner` and :mod:`~nats_bridge.cli` (``toymb bridge nats --routes FILE``),
  :mod:`~nats_bridge.metrics`;
- :mod:`~nats_bridge.jetstream_sink` — the journal job's JetStream destination.
"""

from __future__ import annotations

from .codec import BridgeMessage, Byte, DecodeError, EncodeError, Float32, Long, Short, decode, encode
from .errors import CodecError, NatsBridgeError, NatsConfigError

__all__ = [
    "BridgeMessage", "Byte", "CodecError", "DecodeError", "EncodeError", "Float32", "Long", "NatsBridgeError",
    "NatsConfigError", "Short", "decode", "encode",
]
