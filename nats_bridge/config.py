"""The NATS bridge's settings: the ``nats.*``, ``jms.stomp.*`` and ``nats-bridge.<name>.*`` keys of a routes file.

Same properties style as the other bridges (``journal_spark.routes_file.read_properties``)::

    bridge.id=edge-1
    nats.servers=nats://127.0.0.1:4222          # comma-separated
    nats.user=...  nats.password=...  nats.token=...
    nats.reconnect.wait.ms=250                  # NATS: first reconnect delay, doubled (with jitter) up to 10 s
    nats.reconnect.max=-1                       # NATS: attempts before the bridge stops with an error; -1: forever
    jms.stomp.host=127.0.0.1  jms.stomp.port=61613  jms.stomp.user=...  jms.stomp.password=...
    jms.reconnect.initial.ms=250                # JMS: first reconnect delay, doubled (with jitter) ...
    jms.reconnect.max.ms=10000                  # ... up to this

    nats-bridge.orders.type=request-reply       # request-reply | forward
    nats-bridge.orders.source.nats.subject=svc.orders      # or source.jms.queue=
    nats-bridge.orders.dest.jms.queue=svc.orders           # or dest.nats.subject=
    nats-bridge.orders.queue-group=orders-bridge           # NATS source: workers sharing the subject
    nats-bridge.orders.headers=codec                       # codec | nats | none: headers on the NATS side
    nats-bridge.orders.timeout.ms=5000                     # request-reply: per request
    nats-bridge.orders.max-in-flight=256                   # requests (or unacked forwards) in flight
    nats-bridge.orders.reply.jms.queue=orders.replies      # NATS->JMS: this queue instead of a temp queue
    nats-bridge.orders.reply.nats.prefix=replies.orders    # JMS->NATS: reply subjects under this prefix
    nats-bridge.orders.source.jetstream.durable=orders-fw  # forward NATS->JMS from a JetStream durable
    nats-bridge.orders.dest.jetstream=true                 # forward JMS->NATS into JetStream (acked publish)

    nats-bridge.in.type=ingress                            # a JetStream stream into a broker topic
    nats-bridge.in.source.nats.subject=events.>            # the stream is the one holding this subject
    nats-bridge.in.source.jetstream.durable=events-in
    nats-bridge.in.dest.topic=events                       # ids nats:<stream>:<sequence>
    nats-bridge.in.broker.url=http://127.0.0.1:8080        # (and .token=, .headers=nats|codec|none)

Keys of the journal job (``routes.*``, ``ingress.*``, ``routing.*``, ``kafka.*``, other ``jms.*``) are left
to it, so one file can serve both. Any other key, and every invalid combination, is a
:class:`NatsConfigError` naming the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import NatsConfigError

TYPES = ("request-reply", "forward", "ingress")
HEADER_MODES = ("codec", "nats", "none")
GLOBAL_KEYS = {"bridge.id", "nats.servers", "nats.user", "nats.password", "nats.token", "nats.reconnect.wait.ms",
               "nats.reconnect.max",
               "jms.stomp.host", "jms.stomp.port", "jms.stomp.user", "jms.stomp.password",
               "jms.reconnect.initial.ms", "jms.reconnect.max.ms"}
BRIDGE_KEYS = {"type", "source.nats.subject", "source.jms.queue", "dest.nats.subject", "dest.jms.queue",
               "queue-group", "headers", "timeout.ms", "max-in-flight", "reply.jms.queue", "reply.nats.prefix",
               "source.jetstream.durable", "dest.jetstream", "dest.topic", "broker.url", "token"}
# Owned by the journal job's routes file; ignored here.
FOREIGN_PREFIXES = ("routes.", "ingress.", "routing.", "kafka.", "jms.")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_QUEUE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")


@dataclass(frozen=True)
class Connections:
    """How to reach NATS and ActiveMQ (STOMP), and how fast to retry."""

    nats_servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    nats_user: str | None = None
    nats_password: str | None = None
    nats_token: str | None = None
    nats_reconnect_wait_s: float = 0.25
    nats_reconnect_max: int = -1          # attempts before the bridge gives up and stops; -1: forever
    nats_connect_timeout_s: float = 2.0
    stomp_host: str = "127.0.0.1"
    stomp_port: int = 61613
    stomp_user: str | None = None
    stomp_password: str | None = None
    jms_reconnect_initial_s: float = 0.25
    jms_reconnect_max_s: float = 10.0


@dataclass(frozen=True)
class BridgeConfig:
    """One bridge, validated. ``direction`` is ``nats-to-jms`` or ``jms-to-nats``."""

    name: str
    type: str
    direction: str
    source: str                       # a NATS subject or a JMS queue name
    dest: str
    queue_group: str | None = None
    headers: str = "codec"
    timeout_s: float = 5.0
    max_in_flight: int = 256
    reply_jms_queue: str | None = None
    reply_nats_prefix: str | None = None
    jetstream_durable: str | None = None
    dest_jetstream: bool = False
    broker_url: str = ""              # ingress: the broker node
    token: str | None = None

    def describe(self) -> dict[str, Any]:
        """The parameters, for the status page."""
        return {"type": self.type, "direction": self.direction, "source": self.source, "dest": self.dest,
                "queue_group": self.queue_group, "headers": self.headers, "timeout_ms": int(self.timeout_s * 1000),
                "max_in_flight": self.max_in_flight, "reply_jms_queue": self.reply_jms_queue,
                "reply_nats_prefix": self.reply_nats_prefix, "jetstream_durable": self.jetstream_durable,
                "dest_jetstream": self.dest_jetstream, "broker_url": self.broker_url or None}


@dataclass
class Settings:
    """A parsed routes file: the connections and the bridges, in file order."""

    bridge_id: str
    connections: Connections
    bridges: list[BridgeConfig] = field(default_factory=list)
    path: str = ""


def _int(key: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise NatsConfigError(f"{key} must be an integer, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise NatsConfigError(f"{key} must be {bound}, not {value}")
    return value


def _bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise NatsConfigError(f"{key} must be true or false, not {text!r}")


def _subject(key: str, text: str, wildcards: bool) -> str:
    if not text or any(c.isspace() for c in text) or ".." in text or text.startswith(".") or text.endswith("."):
        raise NatsConfigError(f"{key} is not a NATS subject: {text!r}")
    if not wildcards and ("*" in text.split(".") or ">" in text.split(".")):
        raise NatsConfigError(f"{key} must be a literal subject (no * or >): {text!r}")
    return text


def _queue(key: str, text: str) -> str:
    if not _QUEUE.match(text):
        raise NatsConfigError(f"{key} is not a queue name ([A-Za-z0-9._:-], 1-200): {text!r}")
    return text


def _connections(glob: dict[str, str]) -> Connections:
    servers = tuple(s.strip() for s in glob.get("nats.servers", "nats://127.0.0.1:4222").split(",") if s.strip())
    if not servers or not all(s.startswith(("nats://", "tls://")) for s in servers):
        raise NatsConfigError(f"nats.servers must be nats:// or tls:// URLs, not {glob.get('nats.servers')!r}")
    if glob.get("nats.token") and glob.get("nats.user"):
        raise NatsConfigError("nats.token and nats.user are exclusive: NATS takes one way to authenticate")
    initial = _int("jms.reconnect.initial.ms", glob.get("jms.reconnect.initial.ms", "250"), 1)
    most = _int("jms.reconnect.max.ms", glob.get("jms.reconnect.max.ms", "10000"), 1)
    if most < initial:
        raise NatsConfigError(f"jms.reconnect.max.ms ({most}) is below jms.reconnect.initial.ms ({initial})")
    return Connections(
        nats_servers=servers, nats_user=glob.get("nats.user") or None, nats_password=glob.get("nats.password") or None,
        nats_token=glob.get("nats.token") or None,
        nats_reconnect_wait_s=_int("nats.reconnect.wait.ms", glob.get("nats.reconnect.wait.ms", "250"), 1) / 1000,
        nats_reconnect_max=_int("nats.reconnect.max", glob.get("nats.reconnect.max", "-1"), -1),
        stomp_host=glob.get("jms.stomp.host", "127.0.0.1"),
        stomp_port=_int("jms.stomp.port", glob.get("jms.stomp.port", "61613"), 1, 65535),
        stomp_user=glob.get("jms.stomp.user") or None, stomp_password=glob.get("jms.stomp.password") or None,
        jms_reconnect_initial_s=initial / 1000, jms_reconnect_max_s=most / 1000)


def _ingress(name: str, opts: dict[str, str]) -> BridgeConfig:
    """``type=ingress``: a JetStream durable into a broker topic."""
    def key(k: str) -> str:
        return f"nats-bridge.{name}.{k}"

    allowed = {"type", "source.nats.subject", "source.jetstream.durable", "dest.topic", "broker.url", "token",
               "headers", "max-in-flight"}
    for k in sorted(set(opts) - allowed):
        raise NatsConfigError(f"{key(k)} does not apply to an ingress (it takes {', '.join(sorted(allowed))})")
    for k in ("source.nats.subject", "source.jetstream.durable", "dest.topic", "broker.url"):
        if not opts.get(k):
            raise NatsConfigError(f"{key(k)} is needed by an ingress (a JetStream durable into a broker topic)")
    if not re.match(r"^[A-Za-z0-9._-]{1,200}$", opts["dest.topic"]):
        raise NatsConfigError(f"{key('dest.topic')} is not a topic name: {opts['dest.topic']!r}")
    if not opts["broker.url"].startswith(("http://", "https://")):
        raise NatsConfigError(f"{key('broker.url')} must be an http(s) URL, not {opts['broker.url']!r}")
    if not _NAME.match(opts["source.jetstream.durable"]):
        raise NatsConfigError(f"{key('source.jetstream.durable')} is not a consumer name")
    headers = opts.get("headers", "nats").strip()
    if headers not in HEADER_MODES:
        raise NatsConfigError(f"{key('headers')} must be one of {', '.join(HEADER_MODES)}, not {headers!r}")
    return BridgeConfig(
        name=name, type="ingress", direction="jetstream-to-broker",
        source=_subject(key("source.nats.subject"), opts["source.nats.subject"], wildcards=True),
        dest=opts["dest.topic"], headers=headers, jetstream_durable=opts["source.jetstream.durable"],
        max_in_flight=_int(key("max-in-flight"), opts.get("max-in-flight", "256"), 1, 65536),
        broker_url=opts["broker.url"], token=opts.get("token") or None)


def _bridge(name: str, opts: dict[str, str]) -> BridgeConfig:
    def key(k: str) -> str:
        return f"nats-bridge.{name}.{k}"

    kind = opts.get("type", "").strip()
    if kind not in TYPES:
        raise NatsConfigError(f"{key('type')} must be one of {', '.join(TYPES)}, not {kind!r}")
    if kind == "ingress":
        return _ingress(name, opts)
    for k in ("dest.topic", "broker.url", "token"):
        if k in opts:
            raise NatsConfigError(f"{key(k)} is for an ingress (type=ingress), not a {kind} bridge")
    sources = [k for k in ("source.nats.subject", "source.jms.queue") if k in opts]
    dests = [k for k in ("dest.nats.subject", "dest.jms.queue") if k in opts]
    if len(sources) != 1:
        raise NatsConfigError(f"{key('source.nats.subject')} or {key('source.jms.queue')}: exactly one is needed")
    if len(dests) != 1:
        raise NatsConfigError(f"{key('dest.jms.queue')} or {key('dest.nats.subject')}: exactly one is needed")
    if sources[0].split(".")[1] == dests[0].split(".")[1]:
        raise NatsConfigError(f"{key(dests[0])}: a bridge goes between NATS and JMS; source and destination "
                              f"are both {dests[0].split('.')[1].upper()}")
    to_jms = sources[0] == "source.nats.subject"
    if to_jms:
        source = _subject(key(sources[0]), opts[sources[0]], wildcards=True)
        dest = _queue(key(dests[0]), opts[dests[0]])
    else:
        source = _queue(key(sources[0]), opts[sources[0]])
        dest = _subject(key(dests[0]), opts[dests[0]], wildcards=False)
    headers = opts.get("headers", "codec").strip()
    if headers not in HEADER_MODES:
        raise NatsConfigError(f"{key('headers')} must be one of {', '.join(HEADER_MODES)}, not {headers!r}")
    group = opts.get("queue-group") or None
    if group is not None and not to_jms:
        raise NatsConfigError(f"{key('queue-group')} is for a NATS source; {name} reads the JMS queue {source} "
                              "(JMS queue consumers already share it)")
    if group is not None and not _QUEUE.match(group):
        raise NatsConfigError(f"{key('queue-group')} is not a queue group name: {group!r}")
    rr = kind == "request-reply"
    for only_rr in ("timeout.ms", "reply.jms.queue", "reply.nats.prefix"):
        if only_rr in opts and not rr:
            raise NatsConfigError(f"{key(only_rr)} applies to request-reply bridges; {name} is a forward bridge")
    reply_queue = opts.get("reply.jms.queue") or None
    if reply_queue is not None and not to_jms:
        raise NatsConfigError(f"{key('reply.jms.queue')} is where JMS replies come for NATS requests; "
                              f"{name} goes from JMS to NATS (use reply.nats.prefix)")
    reply_prefix = opts.get("reply.nats.prefix") or None
    if reply_prefix is not None and to_jms:
        raise NatsConfigError(f"{key('reply.nats.prefix')} is where NATS replies come for JMS requests; "
                              f"{name} goes from NATS to JMS (use reply.jms.queue)")
    durable = opts.get("source.jetstream.durable") or None
    if durable is not None:
        if rr or not to_jms:
            raise NatsConfigError(f"{key('source.jetstream.durable')} is for forward bridges from NATS to JMS")
        if group is not None:
            raise NatsConfigError(f"{key('queue-group')}: a JetStream durable is already shared by the workers "
                                  "that bind it; drop queue-group")
        if not _NAME.match(durable):
            raise NatsConfigError(f"{key('source.jetstream.durable')} is not a consumer name: {durable!r}")
    dest_js = _bool(key("dest.jetstream"), opts.get("dest.jetstream", "false"))
    if dest_js and (rr or to_jms):
        raise NatsConfigError(f"{key('dest.jetstream')} is for forward bridges from JMS to NATS")
    return BridgeConfig(
        name=name, type=kind, direction="nats-to-jms" if to_jms else "jms-to-nats", source=source, dest=dest,
        queue_group=group, headers=headers,
        timeout_s=_int(key("timeout.ms"), opts.get("timeout.ms", "5000"), 1, 3_600_000) / 1000,
        max_in_flight=_int(key("max-in-flight"), opts.get("max-in-flight", "256"), 1, 65536),
        reply_jms_queue=_queue(key("reply.jms.queue"), reply_queue) if reply_queue else None,
        reply_nats_prefix=_subject(key("reply.nats.prefix"), reply_prefix, wildcards=False) if reply_prefix else None,
        jetstream_durable=durable, dest_jetstream=dest_js)


def load_settings(path: str | Path, names: tuple[str, ...] = ()) -> Settings:
    """Parse and validate the NATS bridge keys of a routes file (all bridges, or those named).

    Raises:
        NatsConfigError: an unknown key, a bad value or an invalid combination; the message names the key.
    """
    from journal_spark.routes import RoutesError
    from journal_spark.routes_file import read_properties

    try:
        entries = read_properties(path)
    except (OSError, RoutesError) as exc:
        raise NatsConfigError(f"cannot read the routes file {path}: {exc}") from None
    glob: dict[str, str] = {}
    per: dict[str, dict[str, str]] = {}
    for line, key, value in entries:
        if key.startswith("nats-bridge."):
            rest = key[len("nats-bridge."):]
            name, _, sub = rest.partition(".")
            if not _NAME.match(name) or sub not in BRIDGE_KEYS:
                raise NatsConfigError(f"{path}:{line}: unknown key {key} (a bridge takes nats-bridge.<name>."
                                      f"{{{', '.join(sorted(BRIDGE_KEYS))}}})")
            per.setdefault(name, {})[sub] = value
        elif key in GLOBAL_KEYS:
            glob[key] = value
        elif key.startswith("nats."):
            raise NatsConfigError(f"{path}:{line}: unknown key {key} (NATS keys: "
                                  f"{', '.join(sorted(k for k in GLOBAL_KEYS if k.startswith('nats.')))})")
        elif key.startswith("jms.stomp."):
            # The same connection keys the journal job reads: one this bridge's STOMP client does
            # not honour (TLS, vhost, heart-beats) must not be dropped silently.
            raise NatsConfigError(f"{path}:{line}: {key} is not supported by the NATS bridge's STOMP connection "
                                  f"(it supports {', '.join(sorted(k for k in GLOBAL_KEYS if k.startswith('jms.')))})")
        elif not key.startswith(FOREIGN_PREFIXES):
            raise NatsConfigError(f"{path}:{line}: unknown key {key}")
    missing = set(names) - set(per)
    if missing:
        raise NatsConfigError(f"{path}: no bridge named {', '.join(sorted(missing))} (nats-bridge.<name>.type)")
    bridges = [_bridge(n, o) for n, o in per.items() if not names or n in names]
    if not bridges:
        raise NatsConfigError(f"{path}: no NATS bridge (nats-bridge.<name>.type=request-reply|forward)")
    return Settings(bridge_id=glob.get("bridge.id") or "nats-bridge", connections=_connections(glob),
                    bridges=bridges, path=str(path))
