"""Token-less ToyMB clients from admitted networks (``legacy_networks``), off by default.

ToyMB's Java driver cannot send a token, and it advertises ``InetAddress.getLocalHost()``, often
a LAN address. A secured node would refuse it outright. ``TOYMB_LEGACY_NETWORKS`` names the
networks whose clients may call the ToyMB endpoints (``/sendmessage``, ``/advertise``,
``/subscribe``, ``/poll/{id}``: the routes declared ``legacy=True``) without a token, each with
a role and topic scope::

    CIDR=ROLE[+ROLE][@PATTERN[|PATTERN]]      e.g. 172.28.0.0/16=publish+consume@orders*|billing

Roles are ``publish`` and ``consume``: no network is ever admin. Every other endpoint still needs
a token. The networks are also push targets, so a ToyMB subscriber's advertised ``ip:port`` there
may be pushed to.

The risk: anyone who can send packets from an admitted network has that scope, with no secret at
all. Admit only networks you control (a compose or pod network), with the narrowest scope.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..errors import ConfigError
from ..roles import CONSUME, PUBLISH
from .remote import client_address
from .tokens import Grant, parse_grant

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class LegacyNetwork:
    network: IPNetwork
    grant: Grant


class LegacyNetworks:
    """The admitted networks, and the grant of a client address (the first network holding it)."""

    def __init__(self, entries: tuple[str, ...] | list[str]) -> None:
        self.entries: list[LegacyNetwork] = []
        for number, raw in enumerate(entries, start=1):
            where = f"legacy_networks entry #{number} ({raw.strip()!r})"
            cidr, sep, rest = raw.strip().partition("=")
            if not sep:
                raise ConfigError(f"{where} is not CIDR=ROLE[+ROLE][@PATTERN[|PATTERN]]")
            try:
                network = ipaddress.ip_network(cidr.strip(), strict=False)
            except ValueError:
                raise ConfigError(f"{where}: {cidr.strip()!r} is not a CIDR") from None
            grant = parse_grant(rest, where, f"legacy network {network}", frozenset({PUBLISH, CONSUME}))
            self.entries.append(LegacyNetwork(network, grant))

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def cidrs(self) -> list[str]:
        return [str(e.network) for e in self.entries]

    def grant_for(self, remote_addr: str | None) -> Grant | None:
        """The grant of a client at ``remote_addr``, or None when no admitted network holds it."""
        address = client_address(remote_addr)
        if address is None:
            return None
        for entry in self.entries:
            if address.version == entry.network.version and address in entry.network:
                return entry.grant
        return None
