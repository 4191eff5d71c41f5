"""Which addresses a webhook may reach: the allow-list a deployment sets (`--webhook-allow`) and
the address categories it judges by. A setting, so it lives here, where the settings and the
alarms' outbound check (`server.alarms.delivering.outbound`) both read it; pure (no resolving, no
I/O).

By default only globally routable unicast addresses are allowed; a deployment opens private
ranges or host names one by one (`--webhook-allow 10.0.0.0/8`, `--webhook-allow hooks.internal`).
Cloud metadata addresses are refused always, whatever the allow-list says: no alert needs them,
and a broad entry such as `169.254.0.0/16` must not open them by accident.

Embedded IPv4 (for every IPv6 form that carries one): an IPv4-mapped address
(`::ffff:a.b.c.d`) is that IPv4 address and is judged (and connected to) as such; NAT64
(`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses reach the IPv4 address they embed, so they are
refused when that address is, and allowed when it is public or allow-listed; deprecated
IPv4-compatible addresses (`::a.b.c.d`) are refused as reserved unless the allow-list covers the
embedded address; Teredo and the rest of `2001::/23` are refused.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Hetzner, …
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.170.23",  # AWS EKS pod identity
        "169.254.0.23",  # Tencent Cloud
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "168.63.129.16",  # Azure platform (wire server); public, so named here
        "fd00:ec2::254",  # AWS, IPv6
        "fd00:ec2::23",  # AWS EKS pod identity, IPv6
        "fd20:ce::254",  # GCP, IPv6
    )
)

# Special-purpose ranges (IANA IPv4/IPv6 special-purpose registries), with the word a user sees.
# Written out rather than taken from `ipaddress.is_private`/`is_global`, whose answers changed
# between Python releases.
_SPECIAL: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), category)
    for cidr, category in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "private"),
        ("100::/64", "reserved"),
        ("2001::/23", "reserved"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "private"),
        ("ff00::/8", "multicast"),
    )
)
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

_LABEL = re.compile(r"^[a-z0-9_-]{1,63}$")
_NUMBER = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


@dataclass(frozen=True)
class TargetPolicy:
    """Which webhook targets are allowed: global unicast addresses, plus the allow-list.

    `networks` and `hosts` are what a deployment opens (`--webhook-allow CIDR|HOST`); a host
    entry trusts whatever that exact name resolves to (never a metadata address). Build it with
    `from_entries`, which fails fast on an entry that is neither.
    """

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> TargetPolicy:
        """A policy from allow-list entries: `10.0.0.0/8`, `127.0.0.1`, `fd00::/8`, `hooks.lan`."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for raw in entries:
            entry = raw.strip().lower()
            try:
                networks.append(ipaddress.ip_network(entry))
                continue
            except ValueError as exc:
                if "/" in entry or ":" in entry or parse_loose_ipv4(entry) is not None:
                    raise ValueError(f"--webhook-allow {raw!r}: not a valid CIDR ({exc})") from exc
            name = comparable_host_name(entry)
            if name is None:
                raise ValueError(f"--webhook-allow {raw!r}: expected a CIDR or a host name")
            hosts.add(name)
        return cls(networks=tuple(networks), hosts=frozenset(hosts))

    def refusal(self, address: IPAddress, *, name: str | None = None) -> str | None:
        """Why `address` (an answer for host `name`, if any) is refused, or `None` if allowed."""
        address = unmapped(address)
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            return "scoped link-local"
        candidates = [address, *_embedded_ipv4(address)]
        if any(c in METADATA_ADDRESSES for c in candidates):
            return "metadata"
        if name in self.hosts or any(c in n for c in candidates for n in self.networks):
            return None
        for candidate in candidates:
            category = _category(candidate)
            if category is not None:
                return category
        return None


DEFAULT_POLICY = TargetPolicy()


def unmapped(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address as the IPv4 address it is; any other address unchanged."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def _category(address: IPAddress) -> str | None:
    for network, category in _SPECIAL:
        if address in network:
            return category
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST_V6:
        if address in _NAT64:
            return None  # judged by the IPv4 address it embeds
        return "reserved"
    return None


def parse_loose_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any spelling `inet_aton` accepts: 1 to 4 parts, each decimal, octal
    (leading 0) or hex (0x); the last part fills the remaining bytes (`127.1` is 127.0.0.1)."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER.match(p) for p in parts):
        return None
    values: list[int] = []
    for part in parts:
        if part.startswith("0x"):
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                return None
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = sum(v << (8 * (3 - i)) for i, v in enumerate(head)) + last
    return ipaddress.IPv4Address(number)


def ends_in_number(host: str) -> bool:
    """`host`'s last label is a number: an address spelling, never a host name."""
    return _NUMBER.match(host.removesuffix(".").rsplit(".", 1)[-1]) is not None


def comparable_host_name(text: str) -> str | None:
    """`text` as a comparable host name (lower-case, one trailing dot dropped), or `None`."""
    name = text.lower().removesuffix(".")
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        return None
    if _NUMBER.match(labels[-1]):
        return None  # ends in a number: an address spelling, never a name
    return name
