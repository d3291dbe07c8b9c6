"""Bearer tokens, their roles and the topics they reach, parsed from one setting.

``TOYMB_TOKENS`` (file key ``tokens``) is a comma-separated list of grants::

    TOKEN=ROLE[+ROLE...][@PATTERN[|PATTERN...]]

- ``TOKEN``: the secret a client sends as ``Authorization: Bearer TOKEN``. Any characters but
  whitespace and ``,``; it may contain ``=`` (the last ``=`` separates it from the roles).
- ``ROLE``: ``publish``, ``consume`` or ``admin``. ``admin`` implies the other two and may call
  every endpoint.
- ``PATTERN``: an fnmatch-style glob over topic names (``orders.*``, ``logs-?``, ``*``),
  matched case-sensitively. Without ``@...`` a grant covers every topic. A dead-letter topic is
  a topic like any other: ``orders.*`` covers ``orders.dlq``; ``orders`` alone does not.

Example: ``TOYMB_TOKENS="s3cret-p=publish@orders.*,s3cret-c=consume@orders.*|billing,root=admin"``.

Tokens are compared in constant time (:func:`hmac.compare_digest` over SHA-256 digests, so
neither content nor length leaks) and never appear in logs or error messages.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
from dataclasses import dataclass

from ..errors import ConfigError
from ..roles import ADMIN, CONSUME, PUBLISH, ROLES

__all__ = ["ADMIN", "ADMIN_GRANT", "CONSUME", "PUBLISH", "ROLES", "Grant", "TokenTable", "parse_grant",
           "parse_tokens"]


@dataclass(frozen=True)
class Grant:
    """What one token may do: its roles, over topics matching its patterns."""

    name: str  # a safe label for logs and errors ("token #2"), never the secret
    roles: frozenset[str]
    patterns: tuple[str, ...] = ("*",)

    def has_role(self, role: str) -> bool:
        return ADMIN in self.roles or role in self.roles

    def covers(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, pattern) for pattern in self.patterns)

    def allows(self, role: str, topic: str | None) -> bool:
        """Whether this grant has ``role`` on ``topic`` (``None``: on some topic)."""
        if not self.has_role(role):
            return False
        return topic is None or self.covers(topic)

    def allows_any_role(self, topic: str | None) -> bool:
        return any(self.allows(role, topic) for role in ROLES)


ADMIN_GRANT = Grant("cluster", frozenset({ADMIN}))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenTable:
    """The configured grants, looked up by the token a client presents."""

    def __init__(self, grants: list[tuple[str, Grant]]) -> None:
        self._entries = [(_digest(token), grant) for token, grant in grants]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, presented: str) -> Grant | None:
        """The grant of ``presented``, or None. Every entry is compared, so timing says nothing."""
        digest = _digest(presented)
        found: Grant | None = None
        for expected, grant in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = grant
        return found


def parse_tokens(items: tuple[str, ...] | list[str]) -> TokenTable:
    """Parse the ``tokens`` setting (already split on commas).

    Raises:
        ConfigError: an entry is malformed, names an unknown role, or repeats a token. The message
            names the entry by position, never by its secret.
    """
    grants: list[tuple[str, Grant]] = []
    seen: set[bytes] = set()
    for number, raw in enumerate(items, start=1):
        item = raw.strip()
        where = f"tokens entry #{number}"
        token, sep, rest = item.rpartition("=")
        if not sep or not token:
            raise ConfigError(f"{where} is not TOKEN=ROLE[+ROLE][@PATTERN[|PATTERN]]")
        if any(ch.isspace() for ch in token):
            raise ConfigError(f"{where}: a token may not contain whitespace")
        digest = _digest(token)
        if digest in seen:
            raise ConfigError(f"{where} repeats a token given earlier")
        seen.add(digest)
        grants.append((token, parse_grant(rest, where, f"token #{number}", ROLES)))
    return TokenTable(grants)


def parse_grant(text: str, where: str, name: str, allowed: frozenset[str]) -> Grant:
    """``ROLE[+ROLE][@PATTERN[|PATTERN]]`` as a :class:`Grant` named ``name``, roles among ``allowed``.

    Raises:
        ConfigError: no role, a role not in ``allowed``, or ``@`` without patterns; ``where`` says
            which entry.
    """
    role_text, at, pattern_text = text.partition("@")
    roles = frozenset(r.strip() for r in role_text.split("+") if r.strip())
    if not roles:
        raise ConfigError(f"{where} names no role ({', '.join(sorted(allowed))})")
    unknown = roles - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown role {sorted(unknown)[0]!r}; roles are {', '.join(sorted(allowed))}")
    patterns = tuple(p.strip() for p in pattern_text.split("|") if p.strip()) if at else ("*",)
    if not patterns:
        raise ConfigError(f"{where}: '@' must be followed by topic patterns")
    return Grant(name, roles, patterns)
