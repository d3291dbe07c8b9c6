"""Which live node owns a topic: Levenshtein rendezvous (highest-random-weight) hashing.

Every node scores every (topic, node) pair and the lowest score wins. The score is the pair

    (near(topic, node.name), hrw_hash(topic, node.id))

where ``near`` is the Levenshtein distance when the topic is *close* to the node's name (at most a
third of the name's length in edits) and a constant "far" otherwise.

Why not the raw distance first, as DESIGN.md suggests? Because the raw distance mostly measures
how long a name is: with nodes named ``a``, ``broker-east`` and ``c2``, random topics go 43/32/25%,
since a long random topic is "closer" to a long node name. Capping it keeps what the distance is
for (a topic named after a node, or a near variant of that name, lands on that node) and leaves
every other topic to the hash, which is uniform whatever the nodes are called. For nodes named
alike (``toymb-1..3``) both scorings balance within a few percent; tests check the properties.

Because each score depends only on the topic and that one node, the choice is:
- deterministic: the same live set gives the same owner on every node;
- stable: removing a node moves only the topics it owned (the others' minima are unchanged);
- with affinity: a topic equal to a node's name scores 0 there and at least 1 elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import Levenshtein

# Larger than any distance a name of <= 200 characters can have.
FAR = 1 << 16


@dataclass(frozen=True, slots=True)
class Member:
    """A node as ownership sees it: its name, and the stable id derived from the name."""

    name: str
    id: str


def hrw_hash(topic: str, node_id: str) -> int:
    """A 64-bit hash of the pair, the same in every process (unlike Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{node_id}\x00{topic}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def near(topic: str, node_name: str) -> int:
    """The Levenshtein distance when ``topic`` is close to ``node_name``, else :data:`FAR`."""
    limit = len(node_name) // 3
    distance = Levenshtein.distance(topic, node_name, score_cutoff=limit + 1)
    return distance if distance <= limit else FAR


def score(topic: str, member: Member) -> tuple[int, int, str]:
    """Lower wins. The name breaks the (astronomically unlikely) full tie deterministically."""
    return near(topic, member.name), hrw_hash(topic, member.id), member.name


def owner(topic: str, live: Iterable[Member]) -> Member | None:
    """The member of ``live`` that owns ``topic``; None when ``live`` is empty."""
    best: Member | None = None
    best_score: tuple[int, int, str] | None = None
    for member in live:
        s = score(topic, member)
        if best_score is None or s < best_score:
            best, best_score = member, s
    return best


def ranking(topic: str, live: Sequence[Member]) -> list[Member]:
    """All of ``live``, best owner first (the order failover walks in)."""
    return sorted(live, key=lambda m: score(topic, m))


def ownership_key(topic: str, dlq_suffix: str) -> str:
    """The name ownership is computed on: a dead-letter topic lives with its source topic.

    The dispatcher that dead-letters ``orders`` runs on the owner of ``orders``, so
    ``orders.dlq`` must be owned there too, or every dead-letter write would be fenced.
    """
    if dlq_suffix and topic.endswith(dlq_suffix) and len(topic) > len(dlq_suffix):
        return topic[: -len(dlq_suffix)]
    return topic
