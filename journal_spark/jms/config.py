"""The JMS bridge's settings, read from the routes file (:mod:`journal_spark.routes`).

Connection (global keys)::

    jms.stomp.host=127.0.0.1     jms.stomp.port=61613     jms.stomp.user=...  jms.stomp.password=...
    jms.client.id=...            # default client id of durable subscriptions

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
    ingress.orders-in.add-message-id-in-header=true # append to AMQ_BRIDGE_MSG_ID_LIST
    ingress.orders-in.token=...                     # bearer token for the broker

Invalid combinations are :class:`JmsConfigError` at startup, naming the ingress and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..routes import IngressRoute, Routes
from .errors import JmsConfigError

QOS_MODES = ("AT_MOST_ONCE", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE")


@dataclass(frozen=True)
class StompSettings:
    """How to reach ActiveMQ's STOMP connector."""

    url: str = "stomp://127.0.0.1:61613"
    user: str | None = None
    password: str | None = None
    client_id: str | None = None


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

    @property
    def destination(self) -> str:
        """The STOMP destination, ``/queue/<name>`` or ``/topic/<name>``."""
        return f"/{self.source_kind}/{self.source}"

    @property
    def durable(self) -> bool:
        return self.subscription_name is not None


def stomp_settings(settings: dict[str, str]) -> StompSettings:
    """The connection keys (``jms.stomp.*``, ``jms.client.id``) of a routes file."""
    host = settings.get("jms.stomp.host", "127.0.0.1")
    port = _int(settings.get("jms.stomp.port", "61613"), "jms.stomp.port", "the JMS connection")
    if not 0 < port < 65536:
        raise JmsConfigError(f"jms.stomp.port must be a TCP port, not {port}")
    return StompSettings(f"stomp://{host}:{port}", settings.get("jms.stomp.user") or None,
                         settings.get("jms.stomp.password") or None, settings.get("jms.client.id") or None)


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
    stomp = stomp_settings(routes.settings)
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
    return {"source": config.destination, "dest_topic": config.dest_topic, "broker_url": config.broker_url,
            "selector": config.selector, "qos": config.qos, "max_batch_size": config.max_batch_size,
            "max_batch_time_ms": config.max_batch_time_ms,
            "failure_retry_interval_ms": config.failure_retry_interval_ms, "max_retries": config.max_retries,
            "subscription_name": config.subscription_name, "client_id": config.client_id,
            "add_message_id_in_header": config.add_message_id}
