"""ingest.allowlist.Allowlist: which source addresses a provider's list lets in."""

from __future__ import annotations

import ipaddress

import pytest

from webhooks.ingest.allowlist import Allowlist, for_sources
from webhooks.shared.errors import SourceNotAllowed
from webhooks.shared.settings import Settings


def allowlist(*entries: str) -> Allowlist:
    return Allowlist(ipaddress.ip_network(entry, strict=False) for entry in entries)


@pytest.mark.parametrize(("entries", "address", "allowed"), [
    (("3.18.12.63",), "3.18.12.63", True),
    (("3.18.12.63",), "3.18.12.64", False),
    (("192.30.252.0/22",), "192.30.255.255", True),
    (("192.30.252.0/22",), "192.30.252.0", True),
    (("192.30.252.0/22",), "192.30.251.255", False),
    (("192.30.252.0/22",), "192.30.256.1", False),  # not an address
    (("2a0a:a440::/29",), "2a0a:a447:ffff::1", True),
    (("2a0a:a440::/29",), "2a0a:a448::1", False),
    (("2001:db8::7",), "2001:DB8:0:0::7", True),  # another spelling of the same address
    (("2001:db8::7",), "2001:db8::8", False),
    (("0.0.0.0/0",), "203.0.113.9", True),
    (("0.0.0.0/0",), "2001:db8::1", False),  # an IPv4 list holds no IPv6 address
    (("::/0",), "203.0.113.9", False),
    (("::/0",), "2001:db8::1", True),
])
def test_addresses_and_ranges(entries: tuple[str, ...], address: str, allowed: bool) -> None:
    assert allowlist(*entries).allows(address) is allowed


@pytest.mark.parametrize("address", ["::ffff:1.2.3.4", "::FFFF:1.2.3.4", "::ffff:102:304"])
def test_an_ipv4_mapped_address_matches_its_ipv4_entry(address: str) -> None:
    # What a dual-stack ("::") socket reports for an IPv4 client.
    assert allowlist("1.2.3.4").allows(address)
    assert allowlist("1.2.3.0/24").allows(address)
    assert not allowlist("1.2.3.5").allows(address)


def test_an_ipv4_mapped_entry_matches_the_ipv4_client() -> None:
    assert allowlist("::ffff:1.2.3.4").allows("1.2.3.4")
    assert allowlist("::ffff:1.2.3.0/120").allows("1.2.3.200")
    assert not allowlist("::ffff:1.2.3.0/120").allows("1.2.4.1")


@pytest.mark.parametrize(("address", "allowed"), [
    ("[2001:db8::7]", True), ("[2001:db8::7]:443", True), ("198.51.100.4:5678", True),
    ("fe80::1%eth0", False), ("2001:db8::7%eth0", True), ("[2001:db8::8]", False),
])
def test_spellings_a_proxy_may_write(address: str, allowed: bool) -> None:
    assert allowlist("2001:db8::7", "198.51.100.4").allows(address) is allowed


@pytest.mark.parametrize("address", ["", "unknown", "1.2.3", "1.2.3.4.5", "::g", "[", ":",
                                     " ", "1.2.3.4, 5.6.7.8", "01.2.3.4"])
def test_what_is_no_address_is_refused(address: str) -> None:
    assert not allowlist("0.0.0.0/0", "::/0", "1.2.3.4").allows(address)


def test_check_names_the_address() -> None:
    with pytest.raises(SourceNotAllowed, match=r"10\.9\.9\.9") as refused:
        allowlist("127.0.0.1").check("10.9.9.9", "stripe")
    assert refused.value.status == 403
    assert refused.value.reason == "source_ip"
    with pytest.raises(SourceNotAllowed):
        allowlist("127.0.0.1").check(None, "stripe")
    allowlist("127.0.0.1").check("127.0.0.1", "stripe")


def test_from_settings() -> None:
    settings = Settings.from_env({"STRIPE_ALLOWED_IPS": "3.18.12.63, 2001:db8::/32",
                                  "GITHUB_ALLOWED_IPS": "192.30.252.0/22"})
    lists = for_sources(settings)
    assert set(lists) == {"stripe", "github"}
    assert lists["stripe"].allows("2001:db8::1") and not lists["stripe"].allows("3.18.12.64")
    assert lists["github"].allows("192.30.253.1")
