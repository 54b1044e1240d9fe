"""Which source addresses may deliver for a provider: `<PROVIDER>_ALLOWED_IPS`.

The source address is the request's REMOTE_ADDR: the socket's peer, or, with
TRUSTED_PROXIES=N, the Nth X-Forwarded-For entry from the right, which werkzeug's ProxyFix
(applied in app.py) puts there. The entries left of it are whatever the client sent, so a
forged one is never looked at.

The check runs on every request of a provider that has a list, before anything else, so it
is made cheap: the address text is first looked up in a set of the list's single addresses
(one hash); only then is it parsed into an integer (socket.inet_pton, not ipaddress), looked
up in the set of single addresses again, and compared with each range under its mask. An
IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, what a dual-stack socket reports for an IPv4
client) is compared as the IPv4 address it carries. An address that cannot be parsed is
outside every list.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from webhooks.shared.errors import SourceNotAllowed
from webhooks.shared.settings import IPNetwork, Settings

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # IPv4-mapped IPv6 addresses
_MAPPED_PREFIX = 0xFFFF  # the value of an IPv4-mapped address shifted right by 32 bits


class Allowlist:
    """The networks one provider's deliveries may come from."""

    __slots__ = ("_hosts", "_ranges", "_texts")

    def __init__(self, networks: Iterable[IPNetwork]) -> None:
        texts: set[str] = set()
        hosts: dict[int, set[int]] = {4: set(), 6: set()}
        ranges: dict[int, list[tuple[int, int]]] = {4: [], 6: []}
        for network in map(_unmapped, networks):
            base = int(network.network_address)
            if network.num_addresses == 1:
                texts.add(str(network.network_address))
                hosts[network.version].add(base)
            else:
                ranges[network.version].append((base, int(network.netmask)))
        self._texts = frozenset(texts)
        self._hosts = {version: frozenset(values) for version, values in hosts.items()}
        self._ranges = {version: tuple(values) for version, values in ranges.items()}

    def allows(self, address: str) -> bool:
        if address in self._texts:  # the usual case: a listed address, as the socket writes it
            return True
        parsed = _parse(address)
        if parsed is None:
            return False
        version, value = parsed
        if value in self._hosts[version]:
            return True
        for base, mask in self._ranges[version]:
            if value & mask == base:
                return True
        return False

    def check(self, address: str | None, provider: str) -> None:
        """SourceNotAllowed unless address is in the list."""
        if address is None or not self.allows(address):
            raise SourceNotAllowed(f"source address {address} is not allowed for {provider}")


def for_sources(settings: Settings) -> dict[str, Allowlist]:
    """An Allowlist per source that has one, by its label (`stripe`: STRIPE_ALLOWED_IPS,
    `stripe/connect`: STRIPE_CONNECT_ALLOWED_IPS, or STRIPE_ALLOWED_IPS when it has no list
    of its own: shared/sources.py `build`); the others take any address. A provider's is
    there even when it has no secret: the allowlist is checked before whether the source
    is configured, and an unknown source's path takes it (ingest/webhooks.py)."""
    found = {provider: Allowlist(networks)
             for provider, networks in settings.allowed_networks.items()}
    found.update({source.label: Allowlist(source.allowed_networks)
                  for source in settings.sources if source.allowed_networks})
    return found


def _parse(address: str) -> tuple[int, int] | None:
    """(IP version, address as an integer), an IPv4-mapped IPv6 address as IPv4; None for
    text that is no address. The family is told by the colon, so that the usual address is
    parsed in one call, with no exception raised."""
    try:
        if ":" not in address:
            return 4, int.from_bytes(socket.inet_pton(socket.AF_INET, address))
        value = int.from_bytes(socket.inet_pton(socket.AF_INET6, address))
    except OSError:
        bare = _bare(address)
        return None if bare is None else _parse(bare)
    if value >> 32 == _MAPPED_PREFIX:
        return 4, value & 0xFFFFFFFF
    return 6, value


def _bare(address: str) -> str | None:
    """The address in the other spellings a proxy may write into X-Forwarded-For (`[v6]`,
    `[v6]:port`, `v4:port`) or with an IPv6 zone (`fe80::1%eth0`); None when there is
    nothing to take off."""
    text = address.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    text = text.partition("%")[0]
    return text if text and text != address else None


def _unmapped(network: IPNetwork) -> IPNetwork:
    """An entry written as IPv4-mapped IPv6 (`::ffff:1.2.3.0/120`) as the IPv4 network it
    means, so that it matches IPv4 clients however the socket reports them."""
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96 \
            and network.subnet_of(_MAPPED):
        base = int(network.network_address) & 0xFFFFFFFF
        return ipaddress.IPv4Network((base, network.prefixlen - 96))
    return network
