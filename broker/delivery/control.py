"""Changing how a group is delivered: its policy, its push subscribers' formats and secrets, seeks.

Only the topic's owner runs these (their routes are forwarded there), so the dispatcher and
fetcher it tells are the ones delivering the group.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BadRequest, Conflict, NotFound
from ..store import now_ms
from .options import DeadLetterPolicy, GroupPolicy, PolicyCache, PushOptions, new_secret

if TYPE_CHECKING:
    from ..store import GroupRepository, MessageStore
    from ..topics import Topics
    from .dispatcher import Dispatcher
    from .pull import Fetcher

log = logging.getLogger(__name__)

SEEK_TARGETS = ("earliest", "latest")


@dataclass(frozen=True)
class PushRequest:
    """What a push registration asks about its format and secret."""

    format: str | None = None
    secret: str | None = None      # the caller's own secret
    new_secret: bool = False       # make a new one even though the subscriber has one
    overlap_ms: int = 0            # how long the previous secret stays valid
    signing: bool = True           # False: pushes go unsigned (a trusted network, a benchmark)


class DeliveryControl:
    """Stores delivery options and seeks, and tells the owner's dispatcher and fetcher."""

    def __init__(self, groups: GroupRepository, topics: Topics, store: MessageStore, dispatcher: Dispatcher,
                 fetcher: Fetcher, policies: PolicyCache) -> None:
        self.groups = groups
        self.topics = topics
        self.store = store
        self.dispatcher = dispatcher
        self.fetcher = fetcher
        self.policies = policies

    def set_policy(self, topic: str, group: str, filter_text: str | None, dead_letter: DeadLetterPolicy | None) -> None:
        """Give the group a filter and a dead-letter policy, where it has none yet.

        Raises:
            Conflict: the group already has a different one (as Pub/Sub, a filter is fixed once set).
        """
        if filter_text is None and dead_letter is None:
            return
        stored = GroupPolicy.from_text(self.groups.options(topic, group).get(""))
        if (filter_text is not None and stored.filter not in (None, filter_text)) or \
                (dead_letter is not None and stored.dead_letter not in (None, dead_letter)):
            raise Conflict(f"group {group!r} of topic {topic!r} already has another filter or dead-letter policy",
                           code="group_options_differ", current=stored.to_json())
        wanted = GroupPolicy.build(filter_text if filter_text is not None else stored.filter,
                                   dead_letter if dead_letter is not None else stored.dead_letter)
        if wanted != stored:
            self.groups.put_options(topic, group, "", json.dumps(wanted.to_json()))
            log.info("group %s of %s: filter %r, dead-letter policy %s", group, topic, wanted.filter,
                     wanted.dead_letter)
        self.policies.invalidate(topic, group)

    def set_push(self, topic: str, group: str, sid: str, asked: PushRequest, *, reload: bool = True) -> str | None:
        """Store a push subscriber's format and secrets; the secret to reveal (once), if one was made.

        A new subscriber gets a new secret unless it brought its own; an existing one keeps its
        secret unless it asks for a new one or brings another (rotation, with ``overlap_ms``).
        With ``signing`` false it has no secret, and its pushes are not signed. Without ``reload``
        the dispatcher is not told: the caller (a registration) tells it once it is done.
        """
        text = self.groups.options(topic, group).get(sid)
        current = PushOptions.from_text(text)
        fmt = asked.format or current.format
        reveal = None
        updated = PushOptions(fmt, current.secrets)
        if not asked.signing:
            updated = PushOptions(fmt, ())
        elif asked.secret is not None and (not current.secrets or current.secrets[0][0] != asked.secret):
            updated = PushOptions(fmt, current.secrets).rotated(asked.secret, asked.overlap_ms, now_ms())
        elif asked.secret is None and (asked.new_secret or not current.secrets):
            reveal = new_secret()
            updated = PushOptions(fmt, current.secrets).rotated(reveal, asked.overlap_ms, now_ms())
        if text is None or updated != current:
            self.groups.put_options(topic, group, sid, json.dumps(updated.to_json()))
            if reload:
                self.dispatcher.invalidate(topic, group)
        return reveal

    def rotate(self, topic: str, group: str, sid: str, secret: str | None, overlap_ms: int) -> tuple[str | None, int]:
        """Make ``secret`` (or a new one) current; the previous one stays valid ``overlap_ms``.

        Returns the secret to reveal (None when the caller brought it) and until when the
        previous one is valid (ms since the epoch; 0 when none is).
        """
        sub = self.groups.get(sid)
        if sub is None or (sub.topic, sub.group) != (topic, group) or sub.mode != "push":
            raise NotFound(f"no push subscriber {sid!r} in group {group!r} of topic {topic!r}",
                           code="subscriber_not_found")
        reveal = self.set_push(topic, group, sid, PushRequest(secret=secret, new_secret=secret is None,
                                                              overlap_ms=overlap_ms))
        secrets = PushOptions.from_text(self.groups.options(topic, group).get(sid)).secrets
        return reveal, (secrets[1][1] if len(secrets) > 1 else 0)

    def seek(self, topic: str, group: str, *, to: str | None = None, timestamp_ms: int | None = None,
             offsets: dict[int, int] | None = None, partitions: list[int] | None = None) -> dict[int, int]:
        """Set the group's committed offsets: to the first message at or after ``timestamp_ms``, to
        the earliest or latest offset, or to ``offsets``; for ``partitions`` (default all).
        Returns the new offsets.

        Raises:
            NotFound: the group does not exist.
            BadRequest: a partition or offset out of range.
        """
        count = self.topics.get(topic).partitions
        committed = self.groups.committed(topic, group)
        if not committed:
            raise NotFound(f"group {group!r} of topic {topic!r} does not exist", code="group_not_found")
        ends = self.store.end_offsets(topic)
        chosen = sorted(set(partitions if partitions is not None else (offsets or range(count))))
        outside = [p for p in chosen if not 0 <= p < count]
        if outside:
            raise BadRequest(f"partitions {outside[:10]} are not partitions of {topic!r}", code="bad_partition")
        if offsets is not None:
            beyond = [p for p, o in offsets.items() if o > ends.get(p, 0)]
            if beyond:
                raise BadRequest(f"offsets of partitions {beyond[:10]} are past the end", code="bad_offset")
            new = {p: offsets[p] for p in chosen if p in offsets}
        elif timestamp_ms is not None:
            found = self.groups.offsets_since(topic, chosen, timestamp_ms)
            new = {p: found.get(p, ends.get(p, 0)) for p in chosen}
        else:
            new = {p: (0 if to == "earliest" else ends.get(p, 0)) for p in chosen}
        self.dispatcher.seek(topic, group, new, lambda: self.groups.seek(topic, group, new))
        self.fetcher.seek(topic, group, new)
        return new
