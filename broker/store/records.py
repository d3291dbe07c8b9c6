"""The plain values the message store takes and returns besides message rows: topics, their claims,
publisher-given ids."""

from __future__ import annotations

from dataclasses import dataclass

# A publisher-given id's row in toymb_message_ids: (topic, id, partition, offset).
GivenId = tuple[str, str, int, int]


@dataclass(frozen=True)
class Topic:
    """A topic as ``toymb_topics`` holds it: its partition count, and who sequences it at which epoch."""

    name: str
    partitions: int
    owner: str | None = None
    epoch: int = 0


@dataclass(frozen=True)
class TopicClaim:
    """Who sequences a topic, and the epoch they claimed it at (``toymb_topics.owner, epoch``)."""

    owner: str | None
    epoch: int
