"""The TOYMB_TOKENS format: what parses, what is refused, and that errors never show a secret."""

from __future__ import annotations

import pytest

from broker.errors import ConfigError
from broker.security.tokens import parse_tokens


def test_roles_and_patterns() -> None:
    table = parse_tokens(["p=publish@orders.*|billing", "c=consume+publish@logs-?", "a=admin", "x=y=consume"])
    p, c, a, x = (table.lookup(t) for t in ("p", "c", "a", "x=y"))
    assert p is not None and c is not None and a is not None and x is not None
    assert p.allows("publish", "orders.eu") and p.allows("publish", "billing")
    assert not p.allows("publish", "orders") and not p.allows("publish", "billingx")
    assert not p.allows("consume", "orders.eu")
    assert (
        c.allows("consume", "logs-1") and c.allows("publish", "logs-2") and not c.allows("consume", "logs-10")
    )
    assert a.allows("publish", "anything") and a.allows("consume", "x") and a.allows("admin", None)
    assert x.allows("consume", "any.topic")  # no @: every topic; '=' inside a token is fine
    assert not p.allows("admin", None) and not c.allows("admin", None)


def test_patterns_are_case_sensitive_and_unknown_tokens_are_none() -> None:
    table = parse_tokens(["p=publish@orders.*"])
    grant = table.lookup("p")
    assert grant is not None and not grant.allows("publish", "ORDERS.eu")
    assert table.lookup("P") is None and table.lookup("") is None and table.lookup("p ") is None


@pytest.mark.parametrize(
    "entry, says",
    [
        ("hunter2-secret", "is not TOKEN=ROLE"),
        ("=publish", "is not TOKEN=ROLE"),
        ("hunter2-secret=", "names no role"),
        ("hunter2-secret=publish+root", "unknown role 'root'"),
        ("hunter2-secret=publish@", "must be followed by topic patterns"),
        ("hunter2 secret=publish", "whitespace"),
    ],
)
def test_bad_entries_are_refused_without_showing_the_secret(entry: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tokens(["ok=admin", entry])
    assert says in str(caught.value) and "#2" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_repeated_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="repeats"):
        parse_tokens(["same=publish", "same=consume"])


def test_a_node_with_bad_tokens_does_not_start(tmp_path: object) -> None:
    from broker.app import create_app

    with pytest.raises(ConfigError, match="unknown role"):
        create_app({"data_dir": str(tmp_path), "tokens": ("t=superuser",)}, start=False)
