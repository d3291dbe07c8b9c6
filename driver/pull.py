"""``PullConsumer``: long-poll fetches for consumers that cannot accept inbound connections.

    with PullConsumer("orders", "billing") as consumer:
        for message in consumer:        # a message is committed once the loop body finished
            handle(message)

    PullConsumer("orders", "billing").run(handle)   # callback loop; stop() ends it

Only handled messages are committed. A message counts as handled when its handler (or loop body)
returned. After one fails, the rest of its partition is held back until the broker delivers the
failed message again, so a later commit can never acknowledge it by accident.

``message.nack()`` gives a message back at once (it counts as failed, without waiting for the
redelivery period); ``message.extend(ms)`` keeps it from being redelivered while it is still
being worked on. ``message.delivery_attempt`` says which delivery this is.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from .client import Template
from .errors import ConfigurationError, NotFound, ToyMBError, TransportError, Unavailable
from .membership import Membership
from .message import Message
from .subscribe import Subscription, check_name, derive_id

log = logging.getLogger(__name__)


class PullConsumer:
    """Fetches ``topic`` for ``group`` and commits what was handled.

    Parameters:
        topic, group: what to consume.
        template: the client; default ``Template()`` (``TOYMB_URLS``).
        subscriber_id: a fixed id; default derived from the app name, topic and group, so a
            restart keeps it.
        app_name: the app part of a derived id.
        start: where a new group begins, ``"latest"`` or ``"earliest"``.
        max_messages: most messages per fetch.
        wait_ms: how long one fetch waits for messages.
        heartbeat_s: heartbeat period override.
        filter: the group's filter (see :func:`~driver.subscribe.subscribe`).
        dead_letter: the group's dead-letter policy (see :func:`~driver.subscribe.subscribe`).
    """

    def __init__(self, topic: str, group: str, *, template: Template | None = None,
                 subscriber_id: str | None = None, app_name: str | None = None,
                 start: Literal["latest", "earliest"] = "latest", max_messages: int = 100,
                 wait_ms: int = 5000, heartbeat_s: float | None = None, filter: str | None = None,
                 dead_letter: Mapping[str, int] | None = None) -> None:
        check_name(topic, "topic")
        check_name(group, "group")
        if not 1 <= max_messages <= 1000:
            raise ConfigurationError("max_messages must be between 1 and 1000")
        self.topic = topic
        self.group = group
        self.max_messages = max_messages
        self.wait_ms = wait_ms
        self._own_template = template is None
        self.template = template or Template()
        self.subscriber_id = check_name(subscriber_id, "subscriber id") if subscriber_id else \
            derive_id("pull", topic, group, app_name=app_name)
        sub = Subscription(topic=topic, group=group, target=PullConsumer, subscriber_id=self.subscriber_id,
                           start=start, filter=filter, dead_letter=dead_letter)
        self.membership = Membership(self.template, sub, self.subscriber_id, mode="pull",
                                     heartbeat_s=heartbeat_s)
        # Handled but not yet committed: partition -> highest handled offset.
        self._pending: dict[int, int] = {}
        # Partitions held back after a failure: partition -> offset that must come next.
        self._expect: dict[int, int] = {}
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        # Given back by message.nack(): (partition, offset).
        self._nacked: set[tuple[int, int]] = set()

    @property
    def committed_pending(self) -> dict[int, int]:
        """Handled offsets not committed yet (committed before each fetch and on close)."""
        with self._lock:
            return dict(self._pending)

    def start(self) -> PullConsumer:
        """Register in the background (retrying while the broker is down)."""
        self.membership.start()
        return self

    def stop(self) -> None:
        """Make :meth:`run` or the iterator return after the current message."""
        self._stopped.set()

    def commit(self) -> None:
        """Commit what has been handled so far."""
        with self._lock:
            offsets, self._pending = self._pending, {}
        if not offsets:
            return
        try:
            self.template.commit(self.topic, self.group, self.subscriber_id, offsets)
        except ToyMBError:
            with self._lock:
                for partition, offset in offsets.items():
                    self._pending[partition] = max(offset, self._pending.get(partition, -1))
            raise

    def nack(self, message: Message) -> None:
        """:meth:`Message.nack`: give ``message`` back to the broker now; it is not committed."""
        with self._lock:
            self._nacked.add((message.partition, message.offset))
        self.template.nack(self.topic, self.group, self.subscriber_id, [(message.partition, message.offset)])

    def extend(self, message: Message, extend_ms: int) -> None:
        """:meth:`Message.extend`: hold back the redelivery of ``message`` for ``extend_ms``."""
        self.template.extend(self.topic, self.group, self.subscriber_id, [(message.partition, message.offset)],
                             extend_ms)

    def _was_nacked(self, message: Message) -> bool:
        with self._lock:
            if (message.partition, message.offset) in self._nacked:
                self._nacked.discard((message.partition, message.offset))
                return True
            return False

    def _handled(self, message: Message) -> None:
        with self._lock:
            self._pending[message.partition] = max(message.offset, self._pending.get(message.partition, -1))

    def _admissible(self, batch: list[Message]) -> list[Message]:
        """The messages of ``batch`` that may be handled now, keeping each partition in order.

        A partition held after a failure admits nothing past the failed offset until that offset
        comes back, unless the group's committed offset moved past it (another subscriber handled
        it while the partition was away), which releases the hold.
        """
        committed: dict[str, int] | None = None
        admitted = []
        for message in batch:
            expected = self._expect.get(message.partition)
            if expected is not None and message.offset > expected:
                if committed is None:
                    committed = self._committed()
                if committed.get(str(message.partition), -1) <= expected:
                    continue
            if expected is not None and message.offset >= expected:
                del self._expect[message.partition]
            admitted.append(message)
        return admitted

    def _committed(self) -> dict[str, int]:
        try:
            found = self.template.group_info(self.topic, self.group).get("committed", {})
        except ToyMBError:
            return {}
        return {str(k): int(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def _hold(self, unhandled: list[Message]) -> None:
        for message in unhandled:
            self._expect.setdefault(message.partition, message.offset)

    def fetch(self) -> list[Message]:
        """One long-poll fetch (after committing what was handled); empty when nothing came."""
        if not self.membership.registered.is_set():
            self.start()
            self.membership.registered.wait(min(1.0, self.wait_ms / 1000) or 0.1)
            return []
        try:
            self.commit()
            fetched = self.template.fetch(self.topic, self.group, self.subscriber_id,
                                          max_messages=self.max_messages, wait_ms=self.wait_ms)
            return [m.settled_by(self) for m in fetched]
        except NotFound:
            self.membership.lost()
        except (TransportError, Unavailable) as exc:
            log.warning("toymb: fetch for %s failed: %s; retrying", self.subscriber_id, exc)
            self._stopped.wait(random.uniform(0.2, 1.0))
        return []

    def __iter__(self) -> Iterator[Message]:
        self._stopped.clear()
        self.start()
        while not self._stopped.is_set():
            batch = self._admissible(self.fetch())
            index = 0
            given_back: list[Message] = []
            try:
                for index, message in enumerate(batch):
                    if any(m.partition == message.partition for m in given_back):
                        continue  # it comes again after the message given back
                    yield message
                    # Only reached when the loop body returned: the message was handled, or nacked.
                    if self._was_nacked(message):
                        given_back.append(message)
                    else:
                        self._handled(message)
                    index += 1
                    if self._stopped.is_set():
                        break
            finally:
                self._hold(given_back + batch[index:])
        self.commit()

    def run(self, handler: Callable[[Message], object]) -> None:
        """Call ``handler`` for each message until :meth:`stop`; commit what it handled.

        A handler that raises leaves its message uncommitted; its partition waits for the
        broker to deliver that message again, while other partitions go on.
        """
        self._stopped.clear()
        self.start()
        try:
            while not self._stopped.is_set():
                failed: list[Message] = []
                for message in self._admissible(self.fetch()):
                    if any(f.partition == message.partition for f in failed):
                        continue
                    try:
                        handler(message)
                    except Exception:
                        log.exception("toymb: handler failed on %s/%d@%d", message.topic, message.partition,
                                      message.offset)
                        failed.append(message)
                        continue
                    if self._was_nacked(message):
                        failed.append(message)
                        continue
                    self._handled(message)
                self._hold(failed)
        finally:
            self.commit()

    def close(self, *, deregister: bool = True) -> None:
        """Commit what was handled, then deregister (so partitions move now) and release the client."""
        self._stopped.set()
        try:
            self.commit()
        except ToyMBError as exc:
            log.warning("toymb: final commit of %s failed: %s", self.subscriber_id, exc)
        self.membership.stop(deregister=deregister)
        if self._own_template:
            self.template.close()

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
