"""The push-URL allowlist: which hosts a subscriber may make the broker POST messages to.

``TOYMB_PUSH_ALLOW`` (file key ``push.allow``) is a comma-separated list of

- CIDRs (``10.0.0.0/8``, ``127.0.0.1``, ``::1/128``): a resolved address inside one is allowed;
- host patterns (``localhost``, ``*.consumers.example.com``): an fnmatch glob over the URL's
  host name, case-insensitive.

A push URL passes when its scheme is ``http`` or ``https``, it carries no credentials, its host
resolves, and **every** address it resolves to is allowed (by a CIDR, or because the name
matches a host pattern). Link-local addresses (169.254.0.0/16, where cloud metadata services
live, and fe80::/10) are refused unless a listed CIDR lies inside that range, for example
``169.254.10.0/24``: a broad ``0.0.0.0/0`` does not open them.

With the setting empty, a node that serves only loopback clients (no tokens, no
``allow_remote``) allows loopback push URLs (127.0.0.0/8, ::1, ``localhost``): every client
could reach those anyway. A node open to remote clients allows nothing until the list is set,
since its own loopback services are exactly what an SSRF would aim at.

The check runs when a subscriber registers, and again for every push connection: the push
client connects only to an address that the current allowlist allows (see
:mod:`broker.delivery.pusher`), so DNS rebinding and a narrowed allowlist both stop pushes.
Delivery never follows redirects.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from ..errors import BadRequest, ConfigError, Forbidden

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

LINK_LOCAL: tuple[IPNetwork, ...] = (ipaddress.ip_network("169.254.0.0/16"),
                                     ipaddress.ip_network("fe80::/10"))
LOOPBACK_DEFAULT = ("127.0.0.0/8", "::1/128", "localhost")

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def _address(text: str) -> IPAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class PushAllowlist:
    """Checks push URLs against CIDRs and host patterns. Call it with a URL; it raises or returns."""

    def __init__(self, entries: Sequence[str], *, resolver: Resolver = resolve) -> None:
        self.networks: list[IPNetwork] = []
        self.patterns: list[str] = []
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if "/" in entry or ":" in entry or any(ch.isspace() for ch in entry):
                raise ConfigError(f"push_allow entry {entry!r} is neither a CIDR nor a host pattern")
            self.patterns.append(entry.lower())
        self.resolver = resolver

    def _allowed(self, address: IPAddress, by_name: bool) -> bool:
        containing = [n for n in self.networks if n.version == address.version and address in n]
        if any(address in net for net in LINK_LOCAL):
            # Only a network listed inside the link-local range itself opens it.
            return any(n.subnet_of(ll) for n in containing for ll in LINK_LOCAL  # type: ignore[arg-type]
                       if n.version == ll.version)
        return bool(containing) or by_name

    def __call__(self, url: str) -> None:
        """Raise unless the broker may POST to ``url``; see :meth:`addresses`."""
        self.addresses(url)

    def addresses(self, url: str) -> list[str]:
        """The addresses the broker may connect to for ``url``: every one its host resolves to now.

        Raises:
            BadRequest: the URL is malformed, not http(s), carries credentials or does not resolve.
            Forbidden: its host, or one address it resolves to, is not allowed by ``push_allow``.
        """
        if not isinstance(url, str) or not url:
            raise BadRequest("a push subscriber needs a url", code="bad_push_url", field="url")
        try:
            parts = urlsplit(url)
            port = parts.port
            host = parts.hostname
        except ValueError as exc:
            raise BadRequest(f"push url is malformed: {exc}", code="bad_push_url", field="url") from None
        if parts.scheme not in ("http", "https"):
            raise BadRequest("push url must be http:// or https://", code="bad_push_url", field="url")
        if not host:
            raise BadRequest("push url has no host", code="bad_push_url", field="url")
        if parts.username is not None or parts.password is not None:
            raise BadRequest("push url may not carry credentials", code="bad_push_url", field="url")
        port = port or (443 if parts.scheme == "https" else 80)
        by_name = any(fnmatch.fnmatchcase(host.lower(), p) for p in self.patterns)
        try:
            literal: IPAddress | None = _address(host)
        except ValueError:
            literal = None
        if literal is not None:
            resolved = [host]
        else:
            try:
                resolved = self.resolver(host, port)
            except (OSError, UnicodeError, ValueError):
                raise BadRequest(f"push url host {host!r} does not resolve", code="bad_push_url",
                                 field="url") from None
        try:
            addresses = [_address(a) for a in resolved]
        except ValueError:
            raise BadRequest(f"push url host {host!r} does not resolve", code="bad_push_url", field="url") from None
        if not addresses:
            raise BadRequest(f"push url host {host!r} does not resolve", code="bad_push_url", field="url")
        for address in addresses:
            if not self._allowed(address, by_name):
                shown = host if literal is not None else f"{host} ({address})"
                raise Forbidden(f"push url host {shown} is not allowed by push_allow (TOYMB_PUSH_ALLOW)",
                                code="push_url_not_allowed", limit="push_allow", url=url)
        return [str(a) for a in addresses]


def build(entries: Sequence[str], *, loopback_only: bool, legacy_networks: Sequence[str] = ()) -> PushAllowlist:
    """The allowlist a node uses: ``entries`` (or loopback when empty and the node is loopback-only),
    plus the admitted legacy networks, where ToyMB's receivers advertise themselves."""
    base = LOOPBACK_DEFAULT if not entries and loopback_only else entries
    return PushAllowlist([*base, *legacy_networks])
