"""Who is on the other end of an API request: the client's address, behind trusted proxies.

Behind an Ingress or a load balancer every request arrives from the proxy, so a limit per
address would put every unauthenticated caller in one bucket. ``X-Forwarded-For`` names the
client, but anyone can send that header: it is read only when the request comes from a proxy the
config trusts (``api.trusted_proxies``, CIDRs), and then from the right, skipping the trusted
hops, so the address used is the last one a trusted proxy saw, never one the client wrote in
front of it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """The trusted proxies' networks (ValueError names a CIDR that is not one)."""
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` names (an IPv4-mapped one as IPv4, as a dual-stack socket reports an
    IPv4 peer: ``::ffff:10.0.3.4``), or None."""
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _trusted(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
             trusted: Sequence[Network]) -> bool:
    return ip is not None and any(ip in n for n in trusted)


def client_address(remote: str, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """``remote`` itself, unless it is a trusted proxy: then the rightmost address of
    ``X-Forwarded-For`` that is not a trusted proxy (``remote``, when every hop is trusted: the
    leftmost could be one the client wrote)."""
    if not trusted or not forwarded_for or not _trusted(_address(remote), trusted):
        return remote
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        ip = _address(hop)
        if ip is None:
            return remote  # a hop that is not an address: the header cannot be read further
        if not _trusted(ip, trusted):
            return hop
    return remote
