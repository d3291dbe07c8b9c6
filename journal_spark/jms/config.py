"""The JMS bridge's settings, read from the routes file (:mod:`journal_spark.routes`).

Connections. The ``jms.stomp.*`` keys are the connection named ``default``; any number of named
connections (``jms.connection.<name>.<key>``) may sit beside it, each on its own server::

    jms.stomp.host=127.0.0.1     jms.stomp.port=61613     jms.stomp.user=...  jms.stomp.password=...
    jms.stomp.vhost=broker-a     # the STOMP ``host`` header of CONNECT (default: the host)
    jms.stomp.heartbeat.ms=5000  # STOMP heart-beats both ways (default 5000; 0: none); a silent
                                 # peer is a lost connection, on either side (see below)
    jms.stomp.ssl=true           # TLS (ActiveMQ's stomp+ssl connector); the server's certificate is
    jms.stomp.ssl.ca.file=ca.pem #   checked against this CA file (default: the system's CAs)
    jms.stomp.ssl.cert.file=...  jms.stomp.ssl.key.file=...     # a client certificate, if wanted
    jms.client.id=...            # default client id of durable subscriptions
    jms.stomp.detect.types=true  # ingress tells MapMessage/ObjectMessage from text (see below)

    jms.connection.b.host=10.0.0.2   jms.connection.b.port=61613   jms.connection.b.ssl=false ...
    routes.to-b.jms.connection=b     ingress.from-b.jms.connection=b

``detect.types``: ActiveMQ's STOMP gateway shows a MapMessage or an ObjectMessage as an empty text
message, unless the subscription asks for ``transformation: jms-json``; then they arrive marked
``jms-map-json`` / ``jms-object-json`` and the ingress treats them as the seed's soft failure
("message type is not text/binary"). That transformation needs XStream and Jettison on ActiveMQ's
class path (``services/activemq.sh`` puts them there); a server without them drops the
connection, so it is off by default. A StreamMessage or a bare Message still looks like an empty
text message.

Heart-beats are on by default because a bridge holds its marker (and an ingress its unacked
messages) on its connection: a process that froze (a paused VM, a stopped former journal leader)
keeps its TCP connection open, and without heart-beats ActiveMQ never takes them back, so the
standby that took the journal lease could not export to JMS until the frozen one died. ActiveMQ
closes a connection whose heart-beats stop after about three periods (15 s at 5000).

A connection key that is not one of these, a route or ingress naming a connection that is not
defined, a bad port or heartbeat, or a TLS file that cannot be read is refused at startup.

An ingress, with the Artemis JMS bridge's parameters::

    ingress.orders-in.jms.queue=orders              # or jms.topic=
    ingress.orders-in.dest.topic=orders
    ingress.orders-in.broker.url=http://127.0.0.1:8080
    ingress.orders-in.selector=color = 'red'        # applied by ActiveMQ
    ingress.orders-in.qos=ONCE_AND_ONLY_ONCE        # AT_MOST_ONCE | DUPLICATES_OK | ONCE_AND_ONLY_ONCE
    ingress.orders-in.max-batch-size=100            # >= 1
    ingress.orders-in.max-batch-time=500            # ms, cap on a batch's age; -1: only by size
    ingress.orders-in.failure-retry-interval=5000   # ms between reconnection attempts
    ingress.orders-in.max-retries=-1                # -1: forever; 0: fail at once
    ingress.orders-in.subscription-name=sub1        # durable topic subscription (topics only)
    ingress.orders-in.client-id=bridge-1            # needed with subscription-name
    ingress.orders-in.add-message-id-in-header=true # append to ACTIVEMQ_BRIDGE_MSG_ID_LIST
    ingress.orders-in.non-persistent=drop           # bridge (default) | drop NON_PERSISTENT messages
    ingress.orders-in.jms.connection=b              # default: the jms.stomp.* connection
    ingress.orders-in.token=...                     # bearer token for the broker

Invalid combinations are :class:`JmsConfigError` at startup, naming the ingress and the key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ..routes import IngressRoute, Routes
from ..routes_file import JMS_CONNECTION_PREFIX
from .errors import JmsConfigError

QOS_MODES = ("AT_MOST_ONCE", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE")
DEFAULT_CONNECTION = "default"
#: heart-beats both ways unless a connection says otherwise (see the module's docstring)
DEFAULT_HEARTBEAT_MS = 5000

CONNECTION_KEYS = ("host", "port", "user", "password", "vhost", "heartbeat.ms", "ssl", "ssl.ca.file",
                   "ssl.cert.file", "ssl.key.file", "client.id", "detect.types")
_CONNECTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class StompSettings:
    """How to reach one ActiveMQ's STOMP connector (one named connection of a routes file)."""

    url: str = "stomp://127.0.0.1:61613"
    user: str | None = None
    password: str | None = None
    client_id: str | None = None
    name: str = DEFAULT_CONNECTION
    vhost: str | None = None
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    ssl: bool = False
    ssl_ca_file: str | None = None
    ssl_cert_file: str | None = None
    ssl_key_file: str | None = None
    detect_types: bool = False

    @property
    def system(self) -> str:
        """This connection's name in ``jmsbridge.path`` (loop prevention): ``jms:<name>``."""
        return f"jms:{self.name}"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~journal_spark.jms.stompclient.StompClient` for this connection."""
        return {"user": self.user, "password": self.password, "vhost": self.vhost,
                "heartbeat_ms": self.heartbeat_ms, "ssl": self.ssl, "ssl_ca_file": self.ssl_ca_file,
                "ssl_cert_file": self.ssl_cert_file, "ssl_key_file": self.ssl_key_file}


@dataclass(frozen=True)
class IngressConfig:
    """One JMS ingress, validated."""

    name: str
    bridge_id: str
    source_kind: str              # "queue" | "topic"
    source: str
    dest_topic: str
    broker_url: str
    stomp: StompSettings
    token: str | None = None
    selector: str | None = None
    qos: str = "DUPLICATES_OK"
    max_batch_size: int = 100
    max_batch_time_ms: int = 500
    failure_retry_interval_ms: int = 5000
    max_retries: int = -1
    subscription_name: str | None = None
    client_id: str | None = None
    add_message_id: bool = False
    drop_non_persistent: bool = False
    on_error: str = "fail"                  # routing.on-error for messages it cannot bring in
    dead_letter_topic: str | None = None    # a broker topic, with routing.on-error=dead-letter

    @property
    def destination(self) -> str:
        """The STOMP destination, ``/queue/<name>`` or ``/topic/<name>``."""
        return f"/{self.source_kind}/{self.source}"

    @property
    def durable(self) -> bool:
        return self.subscription_name is not None


def stomp_settings(settings: dict[str, str], name: str = DEFAULT_CONNECTION) -> StompSettings:
    """The JMS connection ``name`` of a routes file's settings (``default``: ``jms.stomp.*``).

    Raises:
        JmsConfigError: the connection is not defined, or one of its values is invalid.
    """
    connections = jms_connections(settings)
    if name not in connections:
        raise JmsConfigError(f"no JMS connection named {name!r} (defined: {', '.join(sorted(connections))}; "
                             f"add {JMS_CONNECTION_PREFIX}{name}.host=...)")
    return connections[name]


def jms_connections(settings: dict[str, str]) -> dict[str, StompSettings]:
    """Every JMS connection of a routes file's settings: ``default`` and the named ones, validated."""
    raw: dict[str, dict[str, str]] = {DEFAULT_CONNECTION: {}}
    for key, value in settings.items():
        if key.startswith("jms.stomp."):
            raw[DEFAULT_CONNECTION][key[len("jms.stomp."):]] = value
        elif key == "jms.client.id":
            raw[DEFAULT_CONNECTION]["client.id"] = value
        elif key.startswith(JMS_CONNECTION_PREFIX):
            name, _, sub = key[len(JMS_CONNECTION_PREFIX):].partition(".")
            if not _CONNECTION_NAME.match(name) or sub not in CONNECTION_KEYS:
                raise JmsConfigError(f"unknown JMS connection key {key!r}: expected {JMS_CONNECTION_PREFIX}"
                                     f"<name>.<key> with a key among {', '.join(CONNECTION_KEYS)}")
            if name == DEFAULT_CONNECTION:
                raise JmsConfigError(f"{key}: the connection 'default' is the jms.stomp.* one; name this "
                                     "connection otherwise")
            raw.setdefault(name, {})[sub] = value
    return {name: _connection(name, values) for name, values in raw.items()}


def _connection(name: str, values: dict[str, str]) -> StompSettings:
    where = f"JMS connection {name}"
    prefix = "jms.stomp." if name == DEFAULT_CONNECTION else f"{JMS_CONNECTION_PREFIX}{name}."
    host = values.get("host", "127.0.0.1").strip() or "127.0.0.1"
    port = _int(values.get("port", "61613"), f"{prefix}port", where)
    if not 0 < port < 65536:
        raise JmsConfigError(f"{where}: {prefix}port must be a TCP port, not {port}")
    heartbeat = _int(values.get("heartbeat.ms", str(DEFAULT_HEARTBEAT_MS)), f"{prefix}heartbeat.ms", where)
    if heartbeat < 0 or 0 < heartbeat < 100:
        raise JmsConfigError(f"{where}: {prefix}heartbeat.ms must be 0 (none) or at least 100 ms, not {heartbeat}")
    ssl = _bool(values.get("ssl", "false"), f"{prefix}ssl", where)
    files: dict[str, str | None] = {}
    for key in ("ssl.ca.file", "ssl.cert.file", "ssl.key.file"):
        path = values.get(key, "").strip() or None
        if path is not None and not ssl:
            raise JmsConfigError(f"{where}: {prefix}{key} is set but {prefix}ssl is not true")
        if path is not None and not os.access(path, os.R_OK):
            raise JmsConfigError(f"{where}: {prefix}{key}={path} cannot be read")
        files[key] = path
    if files["ssl.key.file"] and not files["ssl.cert.file"]:
        raise JmsConfigError(f"{where}: {prefix}ssl.key.file needs {prefix}ssl.cert.file")
    return StompSettings(f"stomp{'+ssl' if ssl else ''}://{host}:{port}", values.get("user") or None,
                         values.get("password") or None, values.get("client.id") or None, name,
                         values.get("vhost", "").strip() or None, heartbeat, ssl, files["ssl.ca.file"],
                         files["ssl.cert.file"], files["ssl.key.file"],
                         _bool(values.get("detect.types", "false"), f"{prefix}detect.types", where))


def _int(text: str, key: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise JmsConfigError(f"{where}: {key} must be an integer, not {text!r}") from None


def _bool(text: str, key: str, where: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise JmsConfigError(f"{where}: {key} must be true or false, not {text!r}")


def parse_ingress(route: IngressRoute, routes: Routes) -> IngressConfig:
    """Validate one ``ingress.<name>.*`` entry whose source is a JMS queue or topic."""
    where = f"JMS ingress {route.name}"
    if route.source.kind not in ("jms-queue", "jms-topic"):
        raise JmsConfigError(f"{where}: not a JMS source ({route.source.kind})")
    opts = route.options
    kind = "queue" if route.source.kind == "jms-queue" else "topic"
    qos = opts.get("qos", "DUPLICATES_OK").strip().upper()
    if qos not in QOS_MODES:
        raise JmsConfigError(f"{where}: qos must be one of {', '.join(QOS_MODES)}, not {opts['qos']!r}")
    size = _int(opts.get("max-batch-size", "100"), "max-batch-size", where)
    if size < 1:
        raise JmsConfigError(f"{where}: max-batch-size must be >= 1, not {size}")
    batch_time = _int(opts.get("max-batch-time", "500"), "max-batch-time", where)
    if batch_time != -1 and batch_time < 1:
        raise JmsConfigError(
            f"{where}: max-batch-time must be -1 (no age limit) or >= 1 ms, not {batch_time}"
        )
    retries = _int(opts.get("max-retries", "-1"), "max-retries", where)
    if retries < -1:
        raise JmsConfigError(f"{where}: max-retries must be -1 (forever), 0 or more, not {retries}")
    interval = _int(opts.get("failure-retry-interval", "5000"), "failure-retry-interval", where)
    if interval == -1 and retries != 0:
        raise JmsConfigError(f"{where}: failure-retry-interval=-1 (no retries) needs max-retries=0")
    if interval != -1 and interval < 1:
        raise JmsConfigError(f"{where}: failure-retry-interval must be >= 1 ms, not {interval}")
    try:
        stomp = stomp_settings(routes.settings, opts.get("jms.connection", DEFAULT_CONNECTION).strip())
    except JmsConfigError as exc:
        raise JmsConfigError(f"{where}: {exc}") from None
    subscription = opts.get("subscription-name") or None
    client_id = opts.get("client-id") or stomp.client_id
    if subscription and kind != "topic":
        raise JmsConfigError(
            f"{where}: subscription-name is for a durable topic subscription, but the source "
            f"is the queue {route.source.name!r}"
        )
    if subscription and not client_id:
        raise JmsConfigError(f"{where}: a durable subscription (subscription-name={subscription}) needs a "
                             "client-id (ingress.<name>.client-id or jms.client.id)")
    if qos == "ONCE_AND_ONLY_ONCE" and kind == "topic" and not subscription:
        raise JmsConfigError(f"{where}: ONCE_AND_ONLY_ONCE from a topic needs a durable subscription "
                             "(subscription-name and client-id): a non-durable one loses what is sent while "
                             "the bridge reconnects")
    selector = opts.get("selector", "").strip() or None
    return IngressConfig(
        name=route.name,
        bridge_id=routes.bridge_id,
        source_kind=kind,
        source=route.source.name,
        dest_topic=route.dest_topic,
        broker_url=route.broker_url,
        stomp=stomp,
        token=opts.get("token") or None,
        selector=selector,
        qos=qos,
        max_batch_size=size,
        max_batch_time_ms=batch_time,
        failure_retry_interval_ms=interval,
        max_retries=retries,
        subscription_name=subscription,
        client_id=client_id if (subscription or opts.get("client-id")) else None,
        add_message_id=_bool(
            opts.get("add-message-id-in-header", "false"), "add-message-id-in-header", where
        ),
        drop_non_persistent=opts.get("non-persistent", "bridge") == "drop",
        on_error=routes.on_error,
        dead_letter_topic=routes.dead_letter_topic,
    )


def ingress_configs(routes: Routes, names: tuple[str, ...] = ()) -> list[IngressConfig]:
    """Every JMS ingress of a routes file (or only ``names``), validated; raises on the first bad one."""
    found = [parse_ingress(r, routes) for r in routes.ingress
             if r.source.kind in ("jms-queue", "jms-topic") and (not names or r.name in names)]
    missing = set(names) - {c.name for c in found}
    if missing:
        raise JmsConfigError(f"no JMS ingress named {', '.join(sorted(missing))} in {routes.path}")
    return found


def describe(config: IngressConfig) -> dict[str, Any]:
    """The parameters of an ingress, for status pages (no secrets)."""
    return {"source": config.destination, "connection": config.stomp.name, "url": config.stomp.url,
            "dest_topic": config.dest_topic, "broker_url": config.broker_url,
            "selector": config.selector, "qos": config.qos, "max_batch_size": config.max_batch_size,
            "max_batch_time_ms": config.max_batch_time_ms,
            "failure_retry_interval_ms": config.failure_retry_interval_ms, "max_retries": config.max_retries,
            "subscription_name": config.subscription_name, "client_id": config.client_id,
            "add_message_id_in_header": config.add_message_id,
            "non_persistent": "drop" if config.drop_non_persistent else "bridge", "on_error": config.on_error}
