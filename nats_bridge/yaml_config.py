"""nats-jms-bridge's YAML configuration, read into the same :class:`Settings` as a routes file.

So its users can switch without rewriting: ``toymb bridge nats --routes nats-bridge.yaml``. Read:

- ``bridges[]``: ``name``, ``bridgeType`` (REQUEST_REPLY | FORWARD), ``source`` and ``destination``
  (``busType`` NATS | JMS, ``subject``, ``responseSubject``, ``subscriptionGroup``, ``clusterName``),
  ``copyHeaders`` (true: the header protocol on the NATS side, as the reference; false: the body
  only), ``workers`` x ``tasks`` (the in-flight cap, ``max-in-flight``).
- ``clusters``: ``!<nats>`` (``host``/``port`` or ``servers``, ``userName``, ``password``, ``config``
  with ``io.nats.client.reconnect.wait`` (ms), ``io.nats.client.reconnect.max`` (then the bridge
  stops) and ``io.nats.client.timeout`` (connect, ms)); ``!<jms>`` for ActiveMQ (``config`` with
  ``connectionFactory.ConnectionFactory: tcp://host:61616``, reached over STOMP on 61613 unless
  ``toymb.stomp.port`` says otherwise, ``userName``, ``password``, ``queue.<jndi>`` names).
- A JMS subject ``dynamicQueues/<q>`` or a JNDI name of ``config`` is that queue.

Refused at startup, naming the key: what this bridge does not do (DYNAMIC_FORWARD, NATS to NATS,
JMS topics, transforms, IBM MQ, TLS options, the admin's ``secretKey``, ``systemProperties``), and
any key it does not know.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from .config import BridgeConfig, Connections, Settings, _bridge
from .errors import NatsConfigError

TOP_KEYS = {"name", "dateTime", "bridges", "clusters", "systemProperties", "transforms", "secretKey"}
BRIDGE_KEYS = {"name", "bridgeType", "source", "destination", "copyHeaders", "workers", "tasks", "transforms",
               "replyTransforms", "headerDestinationSubjectName"}
BUS_KEYS = {"name", "busType", "subject", "responseSubject", "subscriptionGroup", "clusterName"}
NATS_KEYS = {"host", "port", "servers", "config", "userName", "password"}
JMS_KEYS = {"config", "userName", "password", "jmsDestinationType", "autoConfig"}
NATS_CONFIG = {"io.nats.client.reconnect.wait", "io.nats.client.reconnect.max", "io.nats.client.timeout"}
ACTIVEMQ_FACTORIES = ("org.apache.activemq.artemis.jndi.ActiveMQInitialContextFactory",
                      "org.apache.activemq.jndi.ActiveMQInitialContextFactory")


class _Tagged(dict[str, Any]):
    tag = ""


def _tagged(tag: str) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> _Tagged:
        value = _Tagged(loader.construct_mapping(node, deep=True))
        value.tag = tag
        return value

    return construct


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no stubs here
    """A safe loader (plain data only) that also knows the reference's ``!<nats>`` and ``!<jms>`` tags."""


_Loader.add_constructor("jms", _tagged("jms"))
_Loader.add_constructor("nats", _tagged("nats"))


def _unknown(where: str, found: dict[str, Any], known: set[str]) -> None:
    extra = sorted(set(found) - known)
    if extra:
        raise NatsConfigError(f"{where}.{extra[0]}: unknown key (known: {', '.join(sorted(known))})")


def _nats_cluster(where: str, p: dict[str, Any], c: dict[str, Any]) -> None:
    _unknown(where, p, NATS_KEYS)
    servers = [str(s) for s in p.get("servers") or []]
    if not servers:
        servers = [f"nats://{p.get('host', 'localhost')}:{int(p.get('port', 4222))}"]
    c["nats_servers"] = tuple(s if "://" in s else f"nats://{s}" for s in servers)
    c["nats_user"], c["nats_password"] = p.get("userName"), p.get("password")
    config = p.get("config") or {}
    for key in config:
        if key not in NATS_CONFIG:
            raise NatsConfigError(f"{where}.config.{key}: not supported (supported: {', '.join(sorted(NATS_CONFIG))})")
    if "io.nats.client.reconnect.wait" in config:
        c["nats_reconnect_wait_s"] = int(config["io.nats.client.reconnect.wait"]) / 1000
    if "io.nats.client.reconnect.max" in config:
        c["nats_reconnect_max"] = int(config["io.nats.client.reconnect.max"])
    if "io.nats.client.timeout" in config:
        c["nats_connect_timeout_s"] = int(config["io.nats.client.timeout"]) / 1000


def _jms_cluster(where: str, p: dict[str, Any], c: dict[str, Any], jndi: dict[str, str]) -> None:
    _unknown(where, p, JMS_KEYS)
    if p.get("jmsDestinationType", "QUEUE") != "QUEUE":
        raise NatsConfigError(f"{where}.jmsDestinationType: only QUEUE is bridged, not {p['jmsDestinationType']}")
    if p.get("autoConfig", "ACTIVE_MQ") not in ("ACTIVE_MQ", "ARTEMIS", "NONE"):
        raise NatsConfigError(f"{where}.autoConfig: {p['autoConfig']} is not supported (ActiveMQ over STOMP only)")
    config = {str(k): str(v) for k, v in (p.get("config") or {}).items()}
    factory = config.pop("java.naming.factory.initial", ACTIVEMQ_FACTORIES[0])
    if factory not in ACTIVEMQ_FACTORIES:
        raise NatsConfigError(f"{where}.config.java.naming.factory.initial: {factory} is not ActiveMQ "
                              "(this bridge speaks STOMP to ActiveMQ; IBM MQ is not supported)")
    url = config.pop("connectionFactory.ConnectionFactory", "tcp://localhost:61616")
    parsed = urlparse(url.split(",")[0].strip("()").removeprefix("failover:").strip("()"))
    stomp_port = config.pop("toymb.stomp.port", None)
    if stomp_port is None and (parsed.port or 61616) != 61616:
        raise NatsConfigError(f"{where}.config.connectionFactory.ConnectionFactory: {url} is not ActiveMQ's default "
                              "port; give its STOMP port as toymb.stomp.port")
    c["stomp_host"] = parsed.hostname or "localhost"
    c["stomp_port"] = int(stomp_port or 61613)
    c["stomp_user"], c["stomp_password"] = p.get("userName"), p.get("password")
    for key, value in config.items():
        if key.startswith("queue."):
            jndi[key[len("queue."):]] = value.rsplit("=", 1)[-1]
        else:
            raise NatsConfigError(f"{where}.config.{key}: not supported (connectionFactory.ConnectionFactory, "
                                  "queue.<jndi name>, toymb.stomp.port)")


def _queue(where: str, subject: str, jndi: dict[str, str]) -> str:
    if subject.startswith("dynamicTopics/"):
        raise NatsConfigError(f"{where}.subject: JMS topics are not bridged ({subject})")
    return jndi.get(subject, subject.removeprefix("dynamicQueues/"))


def load_yaml_settings(path: str | Path, names: tuple[str, ...] = ()) -> Settings:
    """Read a nats-jms-bridge YAML file.

    Raises:
        NatsConfigError: unreadable, or a key or value this bridge does not support (named).
    """
    try:
        doc = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_Loader)
    except (OSError, yaml.YAMLError) as exc:
        raise NatsConfigError(f"cannot read the YAML configuration {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise NatsConfigError(f"{path}: not a nats-jms-bridge configuration (a mapping with bridges and clusters)")
    _unknown("", doc, TOP_KEYS)
    for key in ("systemProperties", "transforms", "secretKey"):
        if doc.get(key):
            raise NatsConfigError(f"{key}: not supported by this bridge")
    conn: dict[str, Any] = {}
    jndi: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for name, cluster in (doc.get("clusters") or {}).items():
        props = cluster.get("properties", cluster) if isinstance(cluster, dict) else cluster
        tag = getattr(props, "tag", "")
        where = f"clusters.{name}.properties"
        if tag == "nats":
            _nats_cluster(where, props, conn)
        elif tag == "jms":
            _jms_cluster(where, props, conn, jndi)
        else:
            raise NatsConfigError(f"{where}: needs the tag !<nats> or !<jms>")
        kinds[name] = tag
    if list(kinds.values()).count("nats") > 1 or list(kinds.values()).count("jms") > 1:
        raise NatsConfigError("clusters: this bridge connects to one NATS and one JMS cluster")
    bridges: list[BridgeConfig] = []
    for i, b in enumerate(doc.get("bridges") or []):
        where = f"bridges[{i}]"
        _unknown(where, b, BRIDGE_KEYS)
        kind = b.get("bridgeType")
        if kind not in ("REQUEST_REPLY", "FORWARD"):
            raise NatsConfigError(f"{where}.bridgeType: {kind} is not supported (REQUEST_REPLY, FORWARD)")
        if b.get("transforms") or b.get("replyTransforms"):
            raise NatsConfigError(f"{where}.transforms: transforms are not supported")
        if b.get("headerDestinationSubjectName", "DESTINATION_HEADER") != "DESTINATION_HEADER":
            raise NatsConfigError(f"{where}.headerDestinationSubjectName: only for DYNAMIC_FORWARD (not supported)")
        opts = {"type": "request-reply" if kind == "REQUEST_REPLY" else "forward",
                "headers": "codec" if b.get("copyHeaders") else "none",
                "max-in-flight": str(int(b.get("workers", 1)) * int(b.get("tasks", 1)))}
        for side in ("source", "destination"):
            bus = b.get(side) or {}
            _unknown(f"{where}.{side}", bus, BUS_KEYS)
            cluster = bus.get("clusterName")
            if cluster not in kinds or kinds[cluster] != str(bus.get("busType", "")).lower():
                raise NatsConfigError(f"{where}.{side}.clusterName: {cluster!r} is no {bus.get('busType')} cluster")
            prefix = "source" if side == "source" else "dest"
            if kinds[cluster] == "nats":
                opts[f"{prefix}.nats.subject"] = str(bus.get("subject", ""))
                if bus.get("subscriptionGroup"):
                    opts["queue-group"] = str(bus["subscriptionGroup"])
                if bus.get("responseSubject"):
                    opts["reply.nats.prefix"] = str(bus["responseSubject"])
            else:
                opts[f"{prefix}.jms.queue"] = _queue(f"{where}.{side}", str(bus.get("subject", "")), jndi)
                if bus.get("responseSubject"):
                    opts["reply.jms.queue"] = _queue(f"{where}.{side}", str(bus["responseSubject"]), jndi)
        bridge_name = "".join(ch if ch.isalnum() or ch in "_-" else "-" for ch in str(b.get("name", f"b{i}")))
        if not names or bridge_name in names:
            try:
                bridges.append(_bridge(bridge_name, opts))
            except NatsConfigError as exc:
                # The check is the routes file's; say where it is in the YAML too.
                raise NatsConfigError(f"{where} ({b.get('name')}): {exc}") from None
    if not bridges:
        raise NatsConfigError(f"{path}: no bridge to run (bridges[])")
    return Settings(bridge_id=str(doc.get("name") or "nats-bridge"), connections=Connections(**conn),
                    bridges=bridges, path=str(path))
