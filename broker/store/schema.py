"""The SQL tables shared by the node, the delivery loop and the journal job.

Column types are generic; on MariaDB/MySQL a few render differently (:class:`Name`, :data:`LONG_TEXT`,
:data:`BODY`), because its defaults there would change what the broker stores.
"""

from __future__ import annotations

from typing import Any

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
    TypeDecorator,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .dialects import MYSQL


class Name(TypeDecorator[str]):
    """A short string that is compared and indexed: topic and group names, ids, content types.

    MariaDB's default collations ignore case (``"A" = "a"``) and trailing spaces (``"a" = "a "``):
    two topics, or two publisher ids, would be one. There it compares bytes as the other databases
    do: ``utf8mb4_nopad_bin`` (MySQL has no NO PAD binary collation in 5.7; ``utf8mb4_bin`` still
    tells case apart but not trailing spaces).
    """

    impl = String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in MYSQL:
            collation = "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_bin"
            return dialect.type_descriptor(mysql.VARCHAR(self.length, charset="utf8mb4", collation=collation))
        return dialect.type_descriptor(String(self.length))


# MariaDB's TEXT holds 64 KiB, less than a message's headers may take (64 values of 8192 characters,
# four bytes each at most); MEDIUMTEXT holds 16 MiB.
LONG_TEXT = Text().with_variant(mysql.MEDIUMTEXT(charset="utf8mb4"), *MYSQL)
# MariaDB's BLOB holds 64 KiB; LONGBLOB holds any body the node accepts (max_body; the server's
# max_allowed_packet must be larger, services/mariadb.sh sets 64M).
BODY = LargeBinary().with_variant(mysql.LONGBLOB(), *MYSQL)
# Every table in utf8mb4 (four-byte UTF-8: emoji), whatever the database's default.
_MYSQL_TABLE: dict[str, Any] = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}

# OFFSET is reserved in MariaDB since 10.6, and SQLAlchemy's list of its reserved words lacks it.
_QUOTE_OFFSET = True

metadata = MetaData()


topics = Table(
    "toymb_topics",
    metadata,
    Column("name", Name(200), primary_key=True),
    Column("partitions", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    # Cluster fencing: the node that sequences the topic, and the epoch it won it at.
    Column("owner", Name(200), nullable=True),
    Column("epoch", BigInteger, nullable=False, default=0),
    **_MYSQL_TABLE,
)

# The next offset to assign per partition; updated in the same transaction as the append,
# so end offsets are O(partitions) to read and always match the committed rows.
partitions = Table(
    "toymb_partitions",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False, default=0),
    PrimaryKeyConstraint("topic", "partition"),
    **_MYSQL_TABLE,
)

messages = Table(
    "toymb_messages",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False, quote=_QUOTE_OFFSET),
    Column("id", Name(256), nullable=False),
    Column("key", LONG_TEXT, nullable=True),
    Column("headers", LONG_TEXT, nullable=False),
    Column("content_type", Name(200), nullable=False),
    Column("body", BODY, nullable=False),
    Column("timestamp", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "partition", "offset", name="pk_toymb_messages"),
    **_MYSQL_TABLE,
)

# The ids publishers gave, so that publishing one again answers with the stored coordinates
# (idempotent publishing). An id the broker made up is 128 random bits and cannot be published
# again by anyone, so it is not indexed: a keyless, id-less publish pays no random-index insert.
# A row lives as long as its message (retention deletes both).
message_ids = Table(
    "toymb_message_ids",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("id", Name(256), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False, quote=_QUOTE_OFFSET),
    PrimaryKeyConstraint("topic", "id", name="pk_toymb_message_ids"),
    Index("ix_toymb_message_ids_position", "topic", "partition", "offset"),
    **_MYSQL_TABLE,
)

subscribers = Table(
    "toymb_subscribers",
    metadata,
    Column("id", Name(200), primary_key=True),
    Column("topic", Name(200), nullable=False),
    Column("group_name", Name(200), nullable=False),
    Column("mode", Name(16), nullable=False),
    Column("url", LONG_TEXT, nullable=True),
    Column("compat", Integer, nullable=False, default=0),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_toymb_subscribers_group", "topic", "group_name"),
    **_MYSQL_TABLE,
)

# Which live subscriber of a group holds each partition.
assignments = Table(
    "toymb_assignments",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("group_name", Name(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("subscriber_id", Name(200), nullable=False),
    PrimaryKeyConstraint("topic", "group_name", "partition"),
    **_MYSQL_TABLE,
)

# next_offset = one past the last acknowledged offset of the group in that partition.
group_offsets = Table(
    "toymb_group_offsets",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("group_name", Name(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "group_name", "partition"),
    **_MYSQL_TABLE,
)

# Delivery options (issue 21): per group (scope "") its filter and dead-letter policy, per push
# subscriber (scope = its id) its payload format and signing secrets; a JSON object each.
delivery_options = Table(
    "toymb_delivery_options",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("group_name", Name(200), nullable=False),
    Column("scope", Name(200), nullable=False),
    Column("options", LONG_TEXT, nullable=False),
    PrimaryKeyConstraint("topic", "group_name", "scope"),
    **_MYSQL_TABLE,
)

nodes = Table(
    "toymb_nodes",
    metadata,
    Column("id", Name(64), primary_key=True),
    Column("name", Name(200), nullable=False),
    Column("url", LONG_TEXT, nullable=False),
    Column("heartbeat_ms", BigInteger, nullable=False),
    Column("started_ms", BigInteger, nullable=False),
    **_MYSQL_TABLE,
)

# Written by the journal job: how far each topic-partition is journaled (for retention and lag).
journal_offsets = Table(
    "toymb_journal_offsets",
    metadata,
    Column("topic", Name(200), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "partition"),
    **_MYSQL_TABLE,
)
