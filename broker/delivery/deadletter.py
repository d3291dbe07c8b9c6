"""Dead letters: a message a group could not deliver goes to ``<topic><dlq_suffix>`` with the reason."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from driver import Template
from driver.errors import ToyMBError

from ..cluster.forward import CLUSTER_TOKEN_HEADER, FORWARDED_HEADER
from ..envelope import NewMessage
from ..errors import Unavailable

if TYPE_CHECKING:
    from ..cluster.router import Router
    from ..config import Settings
    from ..publish import Publisher

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


class DeadLetters:
    """Appends what a group could not deliver to the dead-letter topic, on whichever node owns it."""

    def __init__(self, settings: Settings, me: str, publisher: Publisher, router: Router) -> None:
        self.settings = settings
        self.me = me
        self.publisher = publisher
        self.router = router

    def send(self, topic: str, group: str, subscriber_id: str, row: Any, reason: str, attempts: int,
             status: int | None = None) -> None:
        """Append ``row`` (a stored message of ``topic``) to the dead-letter topic; idempotent.

        The dead-letter topic may be owned by another node of the cluster; then it is published there.

        Raises:
            BrokerError: the append failed, here or on the owner (the caller retries later and does
                not move on).
        """
        ours = {
            "toymb.dlq.reason": reason[:1024],
            "toymb.dlq.attempts": str(attempts),
            "toymb.dlq.topic": topic,
            "toymb.dlq.group": group,
            "toymb.dlq.subscriber": subscriber_id,
            "toymb.dlq.source.partition": str(row.partition),
            "toymb.dlq.source.offset": str(row.offset),
            "toymb.dlq.source.id": row.id,
            "toymb.dlq.source.timestamp": str(row.timestamp),
        }
        if status is not None:  # the receiver's last HTTP status (the reason says it too, in words)
            ours["toymb.dlq.last_status"] = str(status)
        original = json.loads(row.headers) if isinstance(row.headers, str) else dict(row.headers)
        room = max(0, self.settings.max_headers - len(ours))  # the reason wins over the last original headers
        headers = {**dict(list(original.items())[:room]), **ours}
        message = NewMessage(id=dlq_id(group, row.id), key=row.key, headers=headers,
                             content_type=row.content_type, body=bytes(row.body),
                             timestamp=int(time.time() * 1000))
        name = dlq_topic_name(topic, self.settings.dlq_suffix)
        if not self.router.owns(name):
            self._publish_remote(name, message)
            return
        self.publisher.append(name, [message])

    def _publish_remote(self, name: str, message: NewMessage) -> None:
        """Publish to the owner of ``name`` as a forwarded request (so it never travels further)."""
        owner = self.router.owner_of(name)
        url = self.router.url_of(owner)
        if not url:
            raise Unavailable(f"no address known for node {owner}, owner of {name!r}")
        body = {"id": message.id, "key": message.key, "headers": message.headers,
                "content_type": message.content_type, "timestamp": message.timestamp,
                "body_base64": base64.b64encode(message.body).decode("ascii")}
        # The driver's client, as a forwarded node-to-node call: the owner serves it and never
        # sends it further; this node's caller retries.
        with Template(url, timeout=self.settings.forward_timeout_ms / 1000.0, retries=0) as owner_client:
            owner_client.session.headers[FORWARDED_HEADER] = self.me
            if self.settings.cluster_token:
                owner_client.session.headers[CLUSTER_TOKEN_HEADER] = self.settings.cluster_token
            try:
                owner_client.publish_encoded(name, [body])
            except ToyMBError as exc:
                raise Unavailable(f"owner {owner} did not take the dead letter: {str(exc)[:300]}") from None
