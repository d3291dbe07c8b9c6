"""Consumer groups' rows in memory: the twin of :class:`~broker.store.sql_groups.SqlGroupTables`.

Only storage, on the :class:`~broker.store.memory.MemoryData` of a :class:`MemoryStore`, so group
lags see the partitions' end offsets and reads see what retention left. Each method holds the
database's lock throughout, as one SQL transaction would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .group_tables import Plan, StoredRow, StoredSize, Subscriber, Windows
from .memory import MemoryData, MemoryStore


def _size(row: StoredRow) -> int:
    # As SQL's length(): characters of text columns, bytes of the body.
    return len(row.body) + len(row.headers) + len(row.id) + len(row.key or "") + len(row.content_type)


def _ended_before(subscriber: Subscriber, before_ms: int) -> bool:
    lease = subscriber.lease_until_ms
    # Expired (a positive lease) or revoked (minus the moment of revocation) before before_ms.
    return 0 < lease < before_ms or -before_ms < lease <= 0


class MemoryGroupTables:
    """Subscribers, assignments and group offsets in the memory of a :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self._data: MemoryData = store.data

    # -- subscribers --------------------------------------------------------------------------

    def get(self, sid: str) -> Subscriber | None:
        with self._data.lock:
            return self._data.subscribers.get(sid)

    def topic_of(self, sid: str) -> str | None:
        found = self.get(sid)
        return None if found is None else found.topic

    def members(self, topic: str, group: str) -> list[Subscriber]:
        with self._data.lock:
            found = [s for s in self._data.subscribers.values() if (s.topic, s.group) == (topic, group)]
        return sorted(found, key=lambda s: s.id)

    def _insert_subscriber(self, subscriber: Subscriber, created_ms: int) -> bool:
        with self._data.lock:
            if subscriber.id in self._data.subscribers:
                return False
            self._data.subscribers[subscriber.id] = subscriber
            return True

    def _update_subscriber(self, subscriber: Subscriber) -> None:
        with self._data.lock:
            found = self._data.subscribers.get(subscriber.id)
            if found is not None:  # the topic and group of a subscriber never change
                self._data.subscribers[found.id] = replace(subscriber, topic=found.topic, group=found.group)

    def set_lease(self, sid: str, lease_until_ms: int) -> None:
        with self._data.lock:
            found = self._data.subscribers.get(sid)
            if found is not None:
                self._data.subscribers[sid] = replace(found, lease_until_ms=lease_until_ms)

    def delete_subscriber(self, topic: str, group: str, sid: str) -> bool:
        with self._data.lock:
            found = self._data.subscribers.get(sid)
            if found is None or (found.topic, found.group) != (topic, group):
                return False
            del self._data.subscribers[sid]
            return True

    def purge(self, before_ms: int) -> int:
        with self._data.lock:
            ended = [s.id for s in self._data.subscribers.values() if _ended_before(s, before_ms)]
            for sid in ended:
                del self._data.subscribers[sid]
            for stored in self._data.delivery_options.values():
                for scope in [s for s in stored if s and s not in self._data.subscribers]:
                    del stored[scope]
            return len(ended)

    def stale_groups(self, at_ms: int) -> list[tuple[str, str]]:
        with self._data.lock:
            subscribers = self._data.subscribers
            return [pair for pair, held in self._data.assignments.items()
                    if any(s not in subscribers or subscribers[s].lease_until_ms < at_ms for s in held.values())]

    def expired_between(self, since_ms: int, at_ms: int) -> list[tuple[str, str]]:
        with self._data.lock:
            return sorted({(s.topic, s.group) for s in self._data.subscribers.values()
                           if since_ms <= s.lease_until_ms < at_ms})

    def live_groups(self, at_ms: int, mode: str | None) -> list[tuple[str, str]]:
        with self._data.lock:
            return sorted({(s.topic, s.group) for s in self._data.subscribers.values()
                           if s.live(at_ms) and (mode is None or s.mode == mode)})

    def all_groups(self) -> list[tuple[str, str]]:
        with self._data.lock:
            return [pair for pair, offsets in self._data.group_offsets.items() if offsets]

    # -- assignment ---------------------------------------------------------------------------

    def reassign(self, topic: str, group: str, at_ms: int, plan: Plan) -> dict[int, str]:
        with self._data.lock:
            live = [s.id for s in self.members(topic, group) if s.live(at_ms)]
            new = plan(live, self.assignment(topic, group))
            self._data.assignments[(topic, group)] = dict(new)
            return new

    def join(self, subscriber: Subscriber, created_ms: int | None, at_ms: int, plan: Plan) -> dict[int, str] | None:
        with self._data.lock:
            if created_ms is None:
                self._update_subscriber(subscriber)
            elif not self._insert_subscriber(subscriber, created_ms):
                return None
            return self.reassign(subscriber.topic, subscriber.group, at_ms, plan)

    def assignment(self, topic: str, group: str) -> dict[int, str]:
        with self._data.lock:
            return dict(self._data.assignments.get((topic, group), {}))

    def partitions_of(self, sid: str) -> list[int]:
        with self._data.lock:
            return sorted(p for held in self._data.assignments.values() for p, s in held.items() if s == sid)

    # -- offsets ------------------------------------------------------------------------------

    def committed(self, topic: str, group: str) -> dict[int, int]:
        with self._data.lock:
            return dict(self._data.group_offsets.get((topic, group), {}))

    def insert_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        with self._data.lock:
            stored = self._data.group_offsets.setdefault((topic, group), {})
            for p, n in offsets.items():
                stored.setdefault(p, n)

    def advance_offsets(self, topic: str, group: str, next_offsets: dict[int, int], *,
                        durable: bool = True) -> dict[int, int]:
        with self._data.lock:
            stored = self._data.group_offsets.get((topic, group), {})
            moved = {p: stored[p] for p, n in next_offsets.items() if p in stored and n > stored[p]}
            for p in moved:
                stored[p] = next_offsets[p]
            return moved

    def lag_sums(self, topics: Sequence[str]) -> dict[tuple[str, str], int]:
        wanted = set(topics)
        sums: dict[tuple[str, str], int] = {}
        with self._data.lock:
            ends = self._data.ends
            for (t, g), offsets in self._data.group_offsets.items():
                # Like SQL's join: only the partitions the topic has count, and a group with none is left out.
                lags = [ends[(t, p)] - n for p, n in offsets.items() if t in wanted and (t, p) in ends]
                if lags:
                    sums[(t, g)] = sum(lags)
        return sums

    def lagging(self, topics: Sequence[str]) -> dict[tuple[str, str], dict[int, tuple[int, int]]]:
        wanted = set(topics)
        out: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
        with self._data.lock:
            ends = self._data.ends
            for (t, g), offsets in self._data.group_offsets.items():
                if t not in wanted:
                    continue
                behind = {p: (n, ends[(t, p)]) for p, n in offsets.items() if ends.get((t, p), 0) > n}
                if behind:
                    out[(t, g)] = behind
        return out

    def set_offsets(self, topic: str, group: str, offsets: dict[int, int]) -> None:
        with self._data.lock:
            self._data.group_offsets.setdefault((topic, group), {}).update(offsets)

    def offsets_since(self, topic: str, partitions: Sequence[int], timestamp_ms: int) -> dict[int, int]:
        found: dict[int, int] = {}
        with self._data.lock:
            for p in partitions:
                # Timestamps need not grow with offsets (a publisher may give one): look at every row.
                at = [row.offset for row in self._data.rows.get((topic, p), []) if row.timestamp >= timestamp_ms]
                if at:
                    found[p] = min(at)
        return found

    # -- delivery options ---------------------------------------------------------------------

    def options(self, topic: str, group: str) -> dict[str, str]:
        with self._data.lock:
            return dict(self._data.delivery_options.get((topic, group), {}))

    def put_options(self, topic: str, group: str, scope: str, text: str | None) -> None:
        with self._data.lock:
            stored = self._data.delivery_options.setdefault((topic, group), {})
            if text is None:
                stored.pop(scope, None)
            else:
                stored[scope] = text

    # -- message windows ----------------------------------------------------------------------

    def rows(self, topic: str, windows: Windows) -> list[StoredRow]:
        with self._data.lock:
            return [row for p, (start, count) in windows.items()
                    for row in self._data.rows_between(topic, p, start, start + count)]

    def sizes(self, topic: str, windows: Windows) -> list[StoredSize]:
        return [StoredSize(row.partition, row.offset, _size(row)) for row in self.rows(topic, windows)]

    def first_offsets(self, topic: str, starts: dict[int, int]) -> dict[int, int]:
        firsts: dict[int, int] = {}
        with self._data.lock:
            for p, start in starts.items():
                after = self._data.rows_between(topic, p, start, limit=1)
                if after:
                    firsts[p] = after[0].offset
        return firsts
