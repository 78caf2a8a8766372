"""Which connections must start with a PROXY protocol header (docs/configuration.md,
``proxy_protocol``): the parser is :mod:`protocol.proxy`, its use is in
:class:`gateway.connection.GatewayProtocol`.

A header is expected only from the configured load balancers' networks, on the
configured plain listeners: from anyone else a header would let a client choose the
address its connection is logged, limited and authorised by.
"""

from __future__ import annotations

import functools
import ipaddress

from gateway.config import GatewayConfig

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_VERSIONS = {
    "v1": frozenset({1}),
    "v2": frozenset({2}),
    "any": frozenset({1, 2}),
}


@functools.lru_cache(maxsize=16)
def _networks(specs: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(spec, strict=False) for spec in specs)


def trusted(host: str, networks: tuple[str, ...]) -> bool:
    """Whether ``host`` (an address; IPv4-mapped IPv6 counts as IPv4) is in one of
    ``networks``."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a unix socket path or no address: never a balancer
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _networks(networks))


def expected_versions(config: GatewayConfig, listener: str, peer_host: str) -> frozenset[int]:
    """The PROXY protocol versions a new connection on ``listener`` from ``peer_host``
    must start with; empty when it must not carry a header."""
    if not config.proxy_protocol_on(listener):
        return frozenset()
    if not trusted(peer_host, config.proxy_protocol_networks):
        return frozenset()
    return _VERSIONS[config.proxy_protocol]
