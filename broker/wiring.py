"""Where a node's components are built and given what they need: the one place things are wired.

Who calls whom (every edge is a constructor argument, typed)::

    Membership ──view──▶ Router ──ownership changes──▶ Fence, Appender (drop cached claims/offsets)
        │                  │
        ▼                  ▼
    ClusterRepository   Forwarder (to the owner)      Appender ──fence──▶ Fence ──▶ Router
                                                          │
    Publisher ──▶ Topics, Appender                        └──commits──▶ Dispatcher, Fetcher, Reaper
    Delivery: GroupRepository, Dispatcher ─▶ Pusher (allowlist), Fetcher, Reaper, DeadLetters ─▶ Publisher | owner
    Authorizer ──▶ Routes, GroupRepository (a subscriber's topic), TokenTable
    Retention ──▶ MessageStore, JournalRepository

The four repositories come from :func:`broker.store.open_repositories`, all on the one database of
``database_url`` (SQLite, PostgreSQL, or ``memory://<name>`` for a node alone). The store
(``broker/store/``) is the only code that speaks SQL.
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
from .delivery.assignment import assign
from .delivery.deadletter import DeadLetters
from .longpoll import LongPolls
from .metrics import Metrics
from .node import Node, Service, node_id
from .publish import Publisher
from .retention import Retention
from .security import Authorizer, build_allowlist, parse_tokens, subscriber_topic_lookup
from .security.legacy import LegacyNetworks
from .store import open_repositories
from .topics import Topics


def build_node(settings: Settings, routes: Routes) -> tuple[Node, Authorizer]:
    """A node with every component, not started; and the authorizer of its HTTP ``routes``.

    Raises:
        ConfigError: the ``tokens`` or ``push_allow`` setting is malformed.
    """
    repositories = open_repositories(settings.effective_database_url, assign)
    store = repositories.messages
    metrics = Metrics()
    long_polls = LongPolls(settings.threads)
    me = Member(settings.node_name, node_id(settings.node_name))

    membership = Membership(repositories.cluster, me, settings.effective_node_url, settings)
    router = Router(me, settings, metrics, Forwarder(settings, metrics, me.name, long_polls), repositories.cluster,
                    membership)
    membership.subscribe(router.on_view)
    fence = Fence(router, settings.node_lease_ms)
    appender = Appender(store, max_rows=settings.commit_max_rows, fence=fence,
                        observe_rows=metrics.commit_rows.observe)
    router.subscribe(fence.release, synchronous=True)
    router.subscribe(appender.forget_changed, synchronous=True)

    topics = Topics(store, settings)
    publisher = Publisher(settings, topics, appender, metrics)

    tokens = parse_tokens(settings.tokens)
    legacy = LegacyNetworks(settings.legacy_networks)
    loopback_only = not tokens and not settings.allow_remote
    allowlist = build_allowlist(settings.push_allow, loopback_only=loopback_only, legacy_networks=legacy.cidrs)
    dead_letters = DeadLetters(settings, me.name, publisher, router)
    delivery = Delivery(settings, store, repositories.groups, topics, router, metrics, long_polls,
                        allowlist.addresses, dead_letters)
    for listener in (delivery.dispatcher.on_commit, delivery.fetcher.on_commit, delivery.reaper.on_commit):
        appender.subscribe(listener)
    authorizer = Authorizer(tokens, settings.cluster_token, allow_remote=settings.allow_remote,
                            subscriber_topic=subscriber_topic_lookup(repositories.groups), routes=routes,
                            legacy=legacy)

    retention = None
    if settings.retention_ms > 0:
        retention = Retention(settings, store, repositories.journal, router.owns, metrics)
    services: list[Service] = [delivery.dispatcher, delivery.reaper, membership]
    if retention is not None:
        services.append(retention)
    node = Node(settings, store=store, metrics=metrics, long_polls=long_polls, topics=topics, appender=appender,
                publisher=publisher, membership=membership, router=router, delivery=delivery,
                retention=retention, push_addresses=allowlist.addresses, services=services,
                journal=repositories.journal)
    return node, authorizer
