"""Dead letters: a message a group could not deliver goes to ``<topic><dlq_suffix>`` with the reason."""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from ..envelope import NewMessage

if TYPE_CHECKING:
    from ..node import Node

_MAX_NAME = 200
_MAX_ID = 256


def dlq_topic_name(topic: str, suffix: str) -> str:
    """The dead-letter topic of ``topic``; trimmed so it stays a valid topic name."""
    return topic[: _MAX_NAME - len(suffix)] + suffix


def dlq_id(group: str, original_id: str) -> str:
    """A deterministic id, so dead-lettering the same message twice (after a crash) stores it once."""
    candidate = f"{group}:{original_id}"
    if len(candidate) <= _MAX_ID:
        return candidate
    return f"{group}:sha256:{hashlib.sha256(original_id.encode('utf-8')).hexdigest()[:40]}"


def dead_letter(node: Node, topic: str, group: str, subscriber_id: str, row: Any, reason: str,
                attempts: int) -> None:
    """Append ``row`` (a stored message of ``topic``) to the dead-letter topic; idempotent.

    Raises:
        BrokerError: the append failed (the caller retries later and does not move on).
    """
    headers = json.loads(row.headers) if isinstance(row.headers, str) else dict(row.headers)
    headers.update({
        "toymb.dlq.reason": reason[:1024],
        "toymb.dlq.attempts": str(attempts),
        "toymb.dlq.topic": topic,
        "toymb.dlq.group": group,
        "toymb.dlq.subscriber": subscriber_id,
        "toymb.dlq.source.partition": str(row.partition),
        "toymb.dlq.source.offset": str(row.offset),
        "toymb.dlq.source.id": row.id,
        "toymb.dlq.source.timestamp": str(row.timestamp),
    })
    message = NewMessage(id=dlq_id(group, row.id), key=row.key, headers=headers,
                         content_type=row.content_type,
                         body=bytes(row.body), timestamp=int(time.time() * 1000))
    target = node.topic(dlq_topic_name(topic, node.settings.dlq_suffix), create=True)
    node.appender.append(target, [message])
