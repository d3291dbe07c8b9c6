"""The address a request came from, as the security rules compare it."""

from __future__ import annotations

import ipaddress


def client_address(remote_addr: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A request's ``REMOTE_ADDR`` as an address (an IPv4-mapped IPv6 one as IPv4), or None."""
    if not remote_addr:
        return None
    try:
        address = ipaddress.ip_address(remote_addr.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
