"""Delivery options: a group's filter and dead-letter policy, a push subscriber's format and secrets.

They are stored as JSON per scope in the store's delivery options (scope "" for the group, the
subscriber id for a subscriber), and read back into :class:`GroupPolicy` and :class:`PushOptions`.
Validation of what a client sends is here too, so the route and the store agree on one shape.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from driver.signatures import SignatureError, new_secret, secret_key
from journal_spark.predicates import headers_test, parse_predicate

from ..envelope import MessageRow
from ..errors import BadRequest

FORMATS = ("envelope", "cloudevents", "cloudevents-binary", "unwrapped")
MAX_FILTER_CHARS = 4096
# A dead-letter policy's bounds (Pub/Sub allows 5..100 attempts and backoffs of 0..600 s).
MAX_ATTEMPTS = 100
MAX_BACKOFF_MS = 600_000
MAX_OVERLAP_MS = 7 * 24 * 3_600_000
NEVER_MS = 1 << 62


@dataclass(frozen=True)
class DeadLetterPolicy:
    """After ``max_attempts`` failed deliveries a message is dead-lettered; retries wait
    ``min_backoff_ms`` doubling up to ``max_backoff_ms`` (with jitter)."""

    max_attempts: int
    min_backoff_ms: int
    max_backoff_ms: int

    def to_json(self) -> dict[str, int]:
        return {"max_attempts": self.max_attempts, "min_backoff_ms": self.min_backoff_ms,
                "max_backoff_ms": self.max_backoff_ms}


_decode_headers = msgspec.json.decode


def _filter_row(row: MessageRow) -> dict[str, Any]:
    """The fields a predicate reads, from a stored row."""
    # msgspec: the node wrote these headers itself (a JSON object of strings), and json.loads took
    # a third of a filter's cost per message.
    headers = _decode_headers(row.headers) if isinstance(row.headers, str) else dict(row.headers)
    return {"topic": row.topic, "key": row.key, "id": row.id, "headers": headers}


@dataclass(frozen=True)
class GroupPolicy:
    """A group's filter (predicate text) and dead-letter policy; None where the node's defaults apply."""

    filter: str | None = None
    dead_letter: DeadLetterPolicy | None = None
    _match: Callable[[Any], bool] | None = field(default=None, compare=False, repr=False)
    # The filter as one function of the headers, when it reads nothing else (headers_test).
    _match_headers: Callable[[Any], bool] | None = field(default=None, compare=False, repr=False)

    def matches(self, row: MessageRow) -> bool:
        """Whether the group wants ``row`` (always, without a filter)."""
        if self._match_headers is not None:
            headers = row.headers
            return self._match_headers(_decode_headers(headers) if isinstance(headers, str) else headers)
        return self._match is None or bool(self._match(_filter_row(row)))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.filter is not None:
            out["filter"] = self.filter
        if self.dead_letter is not None:
            out["dead_letter"] = self.dead_letter.to_json()
        return out

    @classmethod
    def build(cls, filter_text: str | None, dead_letter: DeadLetterPolicy | None) -> GroupPolicy:
        if filter_text is None:
            return cls(None, dead_letter)
        predicate = parse_predicate(filter_text)
        return cls(filter_text, dead_letter, predicate.test, headers_test(predicate))

    @classmethod
    def from_text(cls, text: str | None) -> GroupPolicy:
        """The policy stored as ``text``; the same object for the same text (a policy never changes):
        the dispatcher reads a group's policy at every reload, and parsing and compiling a filter
        cost 0.15 ms (up to 4 ms for one of MAX_FILTER_CHARS)."""
        return _policy_from_text(text) if text else cls()


@functools.lru_cache(maxsize=1024)
def _policy_from_text(text: str) -> GroupPolicy:
    raw = json.loads(text)
    dead = raw.get("dead_letter")
    return GroupPolicy.build(raw.get("filter"), None if dead is None else DeadLetterPolicy(**dead))


@dataclass(frozen=True)
class PushOptions:
    """A push subscriber's body format and signing secrets: (secret, valid until ms), newest first."""

    format: str = "envelope"
    secrets: tuple[tuple[str, int], ...] = ()

    def keys(self, at_ms: int) -> list[bytes]:
        """The HMAC keys to sign with now: the current secret and those still in their overlap."""
        return [secret_key(s) for s, until in self.secrets if until >= at_ms]

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "secrets": [list(s) for s in self.secrets]}

    @classmethod
    def from_text(cls, text: str | None) -> PushOptions:
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(raw.get("format", "envelope"), tuple((str(s), int(u)) for s, u in raw.get("secrets", [])))

    def rotated(self, secret: str, overlap_ms: int, at_ms: int) -> PushOptions:
        """These options with ``secret`` current; the previous current one stays valid ``overlap_ms``."""
        kept = tuple((s, min(u, at_ms + overlap_ms)) for s, u in self.secrets[:1] if overlap_ms > 0)
        return PushOptions(self.format, ((secret, NEVER_MS), *kept))


class PolicyCache:
    """Groups' policies as the fetcher needs them on every fetch: read from the store at most every
    ``ttl_s``, and at once after :meth:`invalidate` (this node changed them)."""

    def __init__(self, read: Callable[[str, str], dict[str, str]], ttl_s: float = 2.0) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[float, GroupPolicy]] = {}

    def get(self, topic: str, group: str) -> GroupPolicy:
        now = time.monotonic()
        found = self._cache.get((topic, group))
        if found is not None and found[0] > now:
            return found[1]
        if len(self._cache) > 10_000:
            self._cache.clear()
        policy = GroupPolicy.from_text(self._read(topic, group).get(""))
        self._cache[(topic, group)] = (now + self._ttl_s, policy)
        return policy

    def invalidate(self, topic: str, group: str) -> None:
        self._cache.pop((topic, group), None)


# -- validation of what clients send -----------------------------------------------------------

def _bad(message: str, code: str) -> BadRequest:
    return BadRequest(message, code=code)


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(f"{name} must be a whole number from {low} to {high}", "bad_dead_letter")
    return value


def parse_filter(value: Any) -> str | None:
    """A filter's text, checked to parse; None for no filter."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_FILTER_CHARS or "\x00" in value:
        raise _bad(f"filter must be a predicate of at most {MAX_FILTER_CHARS} characters", "bad_filter")
    try:
        parse_predicate(value)
    except ValueError as exc:
        raise _bad(f"filter: {exc}", "bad_filter") from None
    return value


def parse_dead_letter(value: Any) -> DeadLetterPolicy | None:
    """``{"max_attempts", "min_backoff_ms", "max_backoff_ms"}`` checked; None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"max_attempts", "min_backoff_ms", "max_backoff_ms"}:
        raise _bad('dead_letter is {"max_attempts", "min_backoff_ms", "max_backoff_ms"}', "bad_dead_letter")
    attempts = _whole(value.get("max_attempts", 5), "max_attempts", 1, MAX_ATTEMPTS)
    low = _whole(value.get("min_backoff_ms", 200), "min_backoff_ms", 0, MAX_BACKOFF_MS)
    high = _whole(value.get("max_backoff_ms", max(low, 10_000)), "max_backoff_ms", 0, MAX_BACKOFF_MS)
    if high < low:
        raise _bad("max_backoff_ms must be at least min_backoff_ms", "bad_dead_letter")
    return DeadLetterPolicy(attempts, low, high)


def parse_format(value: Any) -> str:
    if value is None:
        return "envelope"
    if value not in FORMATS:
        raise _bad(f"format must be one of {', '.join(FORMATS)}", "bad_format")
    return str(value)


def parse_secret(value: Any) -> str:
    """A client-chosen secret (``whsec_<base64>``), checked."""
    try:
        secret_key(value)
    except SignatureError as exc:
        raise _bad(f"secret: {exc}", "bad_secret") from None
    return str(value)


def parse_overlap(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_OVERLAP_MS:
        raise _bad(f"secret_overlap_ms must be a whole number from 0 to {MAX_OVERLAP_MS}", "bad_secret")
    return value


__all__ = ["FORMATS", "DeadLetterPolicy", "GroupPolicy", "PolicyCache", "PushOptions", "new_secret",
           "parse_dead_letter", "parse_filter", "parse_format", "parse_overlap", "parse_secret"]
