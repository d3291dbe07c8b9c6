"""The roles a token can hold, and the two needs that are not roles (open, any role)."""

from __future__ import annotations

PUBLISH = "publish"
CONSUME = "consume"
ADMIN = "admin"
ROLES = frozenset({PUBLISH, CONSUME, ADMIN})
ANY = "any"  # any of the three roles
OPEN = "open"  # no token needed
