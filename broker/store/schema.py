"""The SQL tables shared by the node, the delivery loop and the journal job."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

metadata = MetaData()


topics = Table(
    "toymb_topics",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("partitions", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    # Cluster fencing: the node that sequences the topic, and the epoch it won it at.
    Column("owner", String(200), nullable=True),
    Column("epoch", BigInteger, nullable=False, default=0),
)

# The next offset to assign per partition; updated in the same transaction as the append,
# so end offsets are O(partitions) to read and always match the committed rows.
partitions = Table(
    "toymb_partitions",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False, default=0),
    PrimaryKeyConstraint("topic", "partition"),
)

messages = Table(
    "toymb_messages",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("id", String(256), nullable=False),
    Column("key", Text, nullable=True),
    Column("headers", Text, nullable=False),
    Column("content_type", String(200), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("timestamp", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "partition", "offset", name="pk_toymb_messages"),
)

# The ids publishers gave, so that publishing one again answers with the stored coordinates
# (idempotent publishing). An id the broker made up is 128 random bits and cannot be published
# again by anyone, so it is not indexed: a keyless, id-less publish pays no random-index insert.
# A row lives as long as its message (retention deletes both).
message_ids = Table(
    "toymb_message_ids",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("id", String(256), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "id", name="pk_toymb_message_ids"),
    Index("ix_toymb_message_ids_position", "topic", "partition", "offset"),
)

subscribers = Table(
    "toymb_subscribers",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("topic", String(200), nullable=False),
    Column("group_name", String(200), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("url", Text, nullable=True),
    Column("compat", Integer, nullable=False, default=0),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_toymb_subscribers_group", "topic", "group_name"),
)

# Which live subscriber of a group holds each partition.
assignments = Table(
    "toymb_assignments",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("group_name", String(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("subscriber_id", String(200), nullable=False),
    PrimaryKeyConstraint("topic", "group_name", "partition"),
)

# next_offset = one past the last acknowledged offset of the group in that partition.
group_offsets = Table(
    "toymb_group_offsets",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("group_name", String(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "group_name", "partition"),
)

nodes = Table(
    "toymb_nodes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("url", Text, nullable=False),
    Column("heartbeat_ms", BigInteger, nullable=False),
    Column("started_ms", BigInteger, nullable=False),
)

# Written by the journal job: how far each topic-partition is journaled (for retention and lag).
journal_offsets = Table(
    "toymb_journal_offsets",
    metadata,
    Column("topic", String(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "partition"),
)
