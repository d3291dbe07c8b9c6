"""Where a node's components are built and given what they need: the one place things are wired.

Who calls whom (every edge is a constructor argument, typed)::

    Membership ──view──▶ Router ──ownership changes──▶ Fence, Appender (drop cached claims/offsets)
        │                  │
        ▼                  ▼
    ClusterStore        Forwarder (to the owner)      Appender ──fence──▶ Fence ──▶ Router
                                                          │
    Publisher ──▶ Topics, Appender                        └──commits──▶ Dispatcher, Fetcher, Reaper
    Delivery: GroupStore, Dispatcher ─▶ Pusher (allowlist), Fetcher, Reaper, DeadLetters ─▶ Publisher | owner
    Authorizer ──▶ Routes, GroupStore (a subscriber's topic), TokenTable
    Retention ──▶ Store, JournalStore

The stores (``broker/store/``) are the only code that speaks SQL.
"""

from __future__ import annotations

from .api.routes import Routes
from .appender import Appender
from .cluster.fencing import Fence
from .cluster.forward import Forwarder
from .cluster.membership import Membership
from .cluster.ownership import Member
from .cluster.router import Router
from .config import Settings
from .delivery import Delivery
from .delivery.deadletter import DeadLetters
from .longpoll import LongPolls
from .metrics import Metrics
from .node import Node, Service, node_id
from .publish import Publisher
from .retention import Retention
from .security import Authorizer, build_allowlist, parse_tokens, subscriber_topic_lookup
from .store import Store
from .store.cluster import ClusterStore
from .topics import Topics


def build_node(settings: Settings, routes: Routes) -> tuple[Node, Authorizer]:
    """A node with every component, not started; and the authorizer of its HTTP ``routes``.

    Raises:
        ConfigError: the ``tokens`` or ``push_allow`` setting is malformed.
    """
    store = Store(settings.effective_database_url)
    metrics = Metrics()
    long_polls = LongPolls(settings.threads)
    me = Member(settings.node_name, node_id(settings.node_name))

    cluster_store = ClusterStore(store)
    membership = Membership(cluster_store, me, settings.effective_node_url, settings)
    router = Router(me, settings, metrics, Forwarder(settings, metrics, me.name, long_polls), cluster_store,
                    membership)
    membership.subscribe(router.on_view)
    fence = Fence(router, settings.node_lease_ms)
    appender = Appender(store, max_rows=settings.commit_max_rows, fence=fence)
    router.subscribe(fence.release, synchronous=True)
    router.subscribe(appender.forget_changed, synchronous=True)

    topics = Topics(store, settings)
    publisher = Publisher(settings, topics, appender, metrics)

    tokens = parse_tokens(settings.tokens)
    loopback_only = not tokens and not settings.allow_remote
    allowlist = build_allowlist(settings.push_allow, loopback_only=loopback_only)
    dead_letters = DeadLetters(settings, me.name, publisher, router)
    delivery = Delivery(settings, store, topics, router, metrics, long_polls, allowlist.addresses, dead_letters)
    for listener in (delivery.dispatcher.on_commit, delivery.fetcher.on_commit, delivery.reaper.on_commit):
        appender.subscribe(listener)
    authorizer = Authorizer(tokens, settings.cluster_token, allow_remote=settings.allow_remote,
                            subscriber_topic=subscriber_topic_lookup(delivery.groups), routes=routes)

    retention = Retention(settings, store, router.owns, metrics) if settings.retention_ms > 0 else None
    services: list[Service] = [delivery.dispatcher, delivery.reaper, membership]
    if retention is not None:
        services.append(retention)
    node = Node(settings, store=store, metrics=metrics, long_polls=long_polls, topics=topics, appender=appender,
                publisher=publisher, membership=membership, router=router, delivery=delivery,
                retention=retention, push_addresses=allowlist.addresses, services=services)
    return node, authorizer
