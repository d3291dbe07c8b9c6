"""Group commit: one writer thread turns many concurrent publishes into few SQL transactions.

A publish is handed to the writer as a request and waits on its future. The writer drains every
request queued so far (up to ``max_rows`` messages), assigns dense offsets, skips ids the topic
already holds, and writes their rows; requests for the same topics that were queued while it
wrote join the transaction, until none is waiting; then it commits once. Only then are the futures
resolved, so an ack always follows a commit, and throughput is not one fsync per request.
What the writer tells the publishers (:class:`Stored`, :class:`Outcome`, :class:`Teller`) is in
:mod:`broker.outcomes`.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from .envelope import NewMessage
from .errors import BadRequest, BrokerError, Unavailable
from .outcomes import Outcome, Prepare, Stored, Teller
from .partitioning import key_partition, partition_for
from .store import AppendTx, GivenId, MessageStore, Topic
from .store.errors import STORE_REFUSED_VALUE

log = logging.getLogger(__name__)

# A hook run inside the write transaction, before anything is written to ``topic``; it raises
# NotOwner when this node may no longer write the topic (cluster fencing). It returns something
# when it claimed the topic: then the writer drops its cached offsets of the topic before assigning
# any, and runs what was returned once the transaction committed (the claim is believed from then).
class FenceCheck(Protocol):
    """The writer's cluster fence (:class:`broker.cluster.fencing.Fence`), as described above."""

    def lock(self, txn: AppendTx, topics: Sequence[str]) -> None:
        """Lock the claims of all ``topics`` of the transaction at once, before they are checked."""
    def __call__(self, txn: AppendTx, topic: str) -> Callable[[], None] | None: ...

CommitListener = Callable[[str, set[int]], None]


@dataclass(slots=True)
class _Request:
    topic: Topic
    messages: list[NewMessage]
    partitions: list[int]
    future: Outcome
    prepare: Prepare | None
    teller: Teller | None
    # Its coordinates, once this transaction assigned them (none for a fenced topic's request).
    stored: list[Stored] | None = None


_STOP = object()


@dataclass(slots=True)
class _Offsets:
    """What one transaction has assigned so far, across the requests that joined it."""

    # Next offset per topic, then per partition (not a (topic, partition) tuple per message).
    next_by_topic: dict[str, dict[int, int]]
    # Publisher-given ids the topic holds, or that a message of this transaction took.
    known: dict[tuple[str, str], Stored]


def _store_error(exc: Exception) -> BrokerError:
    """What a publisher hears when the store refused its commit."""
    if isinstance(exc, STORE_REFUSED_VALUE):
        # The request's own values (validation lets nothing through that the store is known to refuse).
        return BadRequest(f"the store refused a value of this message: {type(exc).__name__}", code="bad_value")
    return Unavailable(f"store write failed: {type(exc).__name__}")


class Appender:
    """The single writer of a node's message rows."""

    def __init__(self, store: MessageStore, *, max_rows: int = 5000, fence: FenceCheck | None = None,
                 observe_rows: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.max_rows = max_rows
        self.fence = fence
        self.observe_rows = observe_rows   # told the rows of each group commit (a metric)
        self.listeners: list[CommitListener] = []
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._next: dict[str, dict[int, int]] = {}
        # What the writer took from the queue while requests joined a transaction but could not
        # join it (another topic, a "forget", the stop): handled first, in order, next time.
        self._carried: collections.deque[Any] = collections.deque()
        self._thread: threading.Thread | None = None
        self.commits = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="toymb-appender", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=10)
            self._thread = None

    def forget(self, topic: str) -> None:
        """Drop cached offsets of ``topic`` (another writer may have moved them)."""
        self._queue.put(("forget", topic))

    def forget_changed(self, gained: set[str], lost: set[str]) -> None:
        """Ownership listener: drop cached offsets of topics that changed hands."""
        for topic in gained | lost:
            self.forget(topic)

    def subscribe(self, listener: CommitListener) -> None:
        """Call ``listener(topic, partitions)`` after each commit that wrote to ``topic``."""
        self.listeners.append(listener)

    def append(self, topic: Topic, messages: list[NewMessage], timeout: float = 60.0) -> list[Stored]:
        """Store ``messages`` in ``topic`` and return their coordinates once committed.

        Raises:
            Unavailable: the commit failed or took longer than ``timeout``.
        """
        future = self.submit(topic, messages)
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            raise Unavailable("the store did not commit in time; retry with the same ids") from None

    def submit(self, topic: Topic, messages: list[NewMessage]) -> Future[list[Stored]]:
        """Queue ``messages`` for ``topic``; the future resolves to their coordinates once committed."""
        future: Future[list[Stored]] = Future()
        self.enqueue(topic, messages, future)
        return future

    def enqueue(self, topic: Topic, messages: list[NewMessage], outcome: Outcome) -> None:
        """Queue ``messages`` for ``topic``; the writer calls ``outcome.set_result`` with their
        coordinates once committed (or ``set_exception``), once, on its own thread."""
        count = topic.partitions
        parts = [key_partition(m.key, count) if m.key is not None else partition_for(m.id, count) for m in messages]
        self._queue.put(_Request(topic, messages, parts, outcome, getattr(outcome, "prepare", None),
                                 getattr(outcome, "teller", None)))

    def _take(self, block: bool) -> Any:
        """The next item: what was carried over first, then the queue's."""
        if self._carried:
            return self._carried.popleft()
        return self._queue.get() if block else self._queue.get_nowait()

    def _run(self) -> None:
        while True:
            item = self._take(block=True)
            if item is _STOP:
                return
            batch: list[_Request] = []
            rows = 0
            stop = False
            while True:
                if isinstance(item, tuple):
                    self._next.pop(item[1], None)
                elif item is _STOP:
                    stop = True
                    break
                else:
                    batch.append(item)
                    rows += len(item.messages)
                if rows >= self.max_rows:
                    break
                try:
                    item = self._take(block=False)
                except queue.Empty:
                    break
            if batch:
                self._commit(batch, join=True)
                self._maintain()
            if stop:
                return

    def _maintain(self) -> None:
        """The store's housekeeping (a WAL restart on SQLite), after the commit was answered, so
        it delays only requests that came meanwhile, and on one thread with the commits."""
        try:
            self.store.maintain()
        except Exception:  # the next commit will tell if the store is really down
            log.exception("store housekeeping between commits failed")

    def _commit(self, batch: list[_Request], join: bool = False) -> None:
        """Commit ``batch`` in one transaction; with ``join``, also the requests for its topics that
        are queued while its rows are written (they are added to ``batch``)."""
        names = {r.topic.name for r in batch}
        fenced: dict[str, BrokerError] = {}
        after_commit: list[Callable[[], None]] = []
        try:
            with self.store.append_transaction() as txn:
                if self.fence is not None:
                    self.fence.lock(txn, sorted(names))
                for name in names:
                    if self.fence is not None:
                        try:
                            then = self.fence(txn, name)
                            if then is not None:
                                # A new claim: what the previous owner wrote decides our next offsets.
                                self._next.pop(name, None)
                                after_commit.append(then)
                        except BrokerError as exc:
                            fenced[name] = exc
                            self._next.pop(name, None)
                state = _Offsets({}, {})
                for request in batch:
                    request.stored = None   # a group commit redone one by one is assigned afresh
                rows, given_ids = self._assign(txn, [r for r in batch if r.topic.name not in fenced], state)
                txn.write(rows, {}, given_ids)
                written = len(rows)
                # Requests that came while those rows were written: one more sync would take
                # them later, while joining adds no wait (only their own rows) and writes each
                # page the commit touches (a partition's end of the key index) once for more rows.
                while join and written < self.max_rows:
                    joined = self._join(names - fenced.keys(), self.max_rows - written)
                    if not joined:
                        break
                    batch.extend(joined)
                    rows, given_ids = self._assign(txn, joined, state)
                    txn.write(rows, {}, given_ids)
                    written += len(rows)
                ends = {(name, partition): nxt for name, nexts in state.next_by_topic.items()
                        for partition, nxt in nexts.items()}
                txn.write([], ends, [])
                self._prepare(batch)
        except Exception as exc:  # noqa: BLE001 - every waiter must hear about it
            for name in names:
                self._next.pop(name, None)
            if len(batch) > 1 and not isinstance(exc, BrokerError):
                # One request's row must not fail the others: commit each on its own, so only the
                # request at fault (or every one, if the store itself is down) hears of the error.
                log.warning("group commit of %d requests failed (%s): committing them one by one",
                            len(batch), type(exc).__name__)
                for request in batch:
                    self._commit([request])  # alone: nothing joins it
                return
            log.warning("commit of %d requests failed: %s", len(batch), exc)
            error = exc if isinstance(exc, BrokerError) else _store_error(exc)
            for request in batch:
                request.future.set_exception(error)
            return
        self.commits += 1
        if self.observe_rows is not None:
            self.observe_rows(written)
        for then in after_commit:
            then()
        for (name, partition), nxt in ends.items():
            self._next[name][partition] = nxt
        touched: dict[str, set[int]] = {}
        tellers: dict[Teller, list[tuple[Any, list[Stored]]]] = {}
        for request in batch:
            stored = request.stored
            if stored is None:
                request.future.set_exception(fenced[request.topic.name])
                continue
            if request.teller is not None:
                tellers.setdefault(request.teller, []).append((request.future, stored))
            else:
                request.future.set_result(stored)
            touched.setdefault(request.topic.name, set()).update(request.partitions)
        for teller, told in tellers.items():
            try:
                teller.set_results(told)
            except Exception:
                log.exception("telling the outcomes of a commit failed")
        for name, parts in touched.items():
            for listener in self.listeners:
                try:
                    listener(name, parts)
                except Exception:
                    log.exception("commit listener failed")

    @staticmethod
    def _prepare(batch: list[_Request]) -> None:
        """Tell the requests that can use it their coordinates before the commit (see Prepare)."""
        tellers: dict[Teller, list[tuple[Any, list[Stored]]]] = {}
        for request in batch:
            stored = request.stored   # none for a fenced request
            if stored is None:
                continue
            if request.teller is not None:
                tellers.setdefault(request.teller, []).append((request.future, stored))
                continue
            prepare = request.prepare
            if prepare is not None:
                try:
                    prepare(stored)
                except Exception:   # only a head start: the answer is made after the commit anyway
                    log.exception("preparing the answer of a publish failed")
        for teller, told in tellers.items():
            try:
                teller.prepare_all(told)
            except Exception:
                log.exception("preparing the answers of a commit failed")

    def _join(self, names: set[str], room: int) -> list[_Request]:
        """The requests queued now for the topics ``names`` (locked and fenced by this transaction),
        up to about ``room`` messages. Joining stops at the first item that cannot join; it and
        everything after it wait for the next transaction, in queue order."""
        joined: list[_Request] = []
        while room > 0 and not self._carried:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Request) and item.topic.name in names:
                joined.append(item)
                room -= len(item.messages)
            else:
                self._carried.append(item)
        return joined

    def _assign(self, txn: AppendTx, batch: list[_Request], state: _Offsets) -> tuple[
            list[tuple[Any, ...]], list[GivenId]]:
        """Offsets for the messages of ``batch``, from where ``state`` (this transaction's) left
        them, told to each request (``stored``); the rows to write and the given ids to index."""
        by_topic: dict[str, list[str]] = {}
        for request in batch:
            ids = by_topic.get(request.topic.name)
            if ids is None:
                ids = by_topic[request.topic.name] = []
            for message in request.messages:
                if message.given_id:
                    ids.append(message.id)
        known = state.known
        for name, ids in by_topic.items():
            if name not in self._next:
                self._next[name] = txn.end_offsets(name)
            if not ids:
                continue
            for msg_id, (p, o) in txn.existing_ids(name, ids).items():
                known[(name, msg_id)] = Stored(msg_id, name, p, o, duplicate=True)
        # Next offsets per topic, then per partition: this loop runs once per message of the
        # node, so no (topic, partition) tuple is made per message, and a broker-made id is not
        # looked up among the given ones (it cannot be one of them).
        next_by_topic = state.next_by_topic
        for name in by_topic:
            next_by_topic.setdefault(name, {})
        rows: list[tuple[Any, ...]] = []
        given_ids: list[GivenId] = []
        row = txn.row
        for request in batch:
            name = request.topic.name
            nexts = next_by_topic[name]
            committed = self._next[name]
            out: list[Stored] = []
            for message, partition in zip(request.messages, request.partitions, strict=True):
                msg_id = message.id
                if message.given_id:
                    previous = known.get((name, msg_id))
                    if previous is not None:
                        out.append(previous if previous.duplicate
                                   else msgspec.structs.replace(previous, duplicate=True))
                        continue
                offset = nexts.get(partition)
                if offset is None:
                    offset = committed.get(partition, 0)
                nexts[partition] = offset + 1
                rows.append(row(name, partition, offset, message))
                stored = Stored(msg_id, name, partition, offset, False)
                if message.given_id:
                    given_ids.append((name, msg_id, partition, offset))
                    known[(name, msg_id)] = stored
                out.append(stored)
            request.stored = out
        return rows, given_ids
