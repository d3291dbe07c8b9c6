"""Where the driver reads its environment: node URLs, token, app name and consumer address.

Every ``os.environ`` lookup of the driver lives here, so the names a user can set are in one place:

    TOYMB_URLS            comma-separated node URLs (default http://127.0.0.1:8080)
    TOYMB_TOKEN           bearer token sent on every call
    TOYMB_APP_NAME        the app part of derived subscriber ids
    TOYMB_INSTANCE        optional instance part of derived subscriber ids (one per replica)
    TOYMB_CONSUMER_HOST   address the push receiver binds (default 127.0.0.1)
    TOYMB_CONSUMER_PORT   port the push receiver binds (default 0: any free port)
    TOYMB_ADVERTISE_URL   base URL the broker pushes to, when it must reach the receiver by another name
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_URL = "http://127.0.0.1:8080"
#: (connect, read) seconds: every call has both, so a hung node can never block a caller forever.
DEFAULT_TIMEOUT: tuple[float, float] = (3.05, 10.0)


def env(name: str) -> str | None:
    """A ``TOYMB_*`` variable, or None when it is unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def node_urls(urls: str | list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The node URLs to use: ``urls`` if given, else ``TOYMB_URLS``, else the local default."""
    if urls is None:
        urls = env("TOYMB_URLS") or DEFAULT_URL
    if isinstance(urls, str):
        urls = urls.split(",")
    cleaned = [u.strip().rstrip("/") for u in urls if u and u.strip()]
    if not cleaned:
        raise ValueError("at least one node URL is needed")
    for url in cleaned:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"node URL {url!r} must start with http:// or https://")
    return cleaned


@dataclass(frozen=True)
class ConsumerSettings:
    """Where a push receiver listens and what it tells the broker."""

    host: str = "127.0.0.1"
    port: int = 0
    advertise_url: str | None = None

    @classmethod
    def from_env(cls, host: str | None = None, port: int | None = None,
                 advertise_url: str | None = None) -> ConsumerSettings:
        """Explicit values win over ``TOYMB_CONSUMER_HOST/PORT`` and ``TOYMB_ADVERTISE_URL``."""
        env_port = env("TOYMB_CONSUMER_PORT")
        if port is None and env_port is not None:
            try:
                port = int(env_port)
            except ValueError:
                raise ValueError(f"TOYMB_CONSUMER_PORT must be a port number, not {env_port!r}") from None
        return cls(host=host or env("TOYMB_CONSUMER_HOST") or "127.0.0.1", port=port or 0,
                   advertise_url=(advertise_url or env("TOYMB_ADVERTISE_URL") or None))
