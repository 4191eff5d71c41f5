"""Where webhooks may go: the target policy, and the check of a URL against it.

A webhook URL is typed by a user, so the server must not become their way into its own network
(an internal admin page, a database port) or into the cloud's instance metadata (credentials).
By default only globally routable unicast addresses are allowed; a deployment opens private
ranges or host names one by one (`--webhook-allow 10.0.0.0/8`, `--webhook-allow hooks.internal`).
Cloud metadata addresses and host names are refused always, whatever the allow-list says: no
alert needs them, and a broad entry such as `169.254.0.0/16` must not open them by accident.

The check looks at the address that will be connected to, never at the string: the URL is parsed
with the same parser the HTTP client uses, numeric host spellings that the C resolver would accept
(`127.1`, `0x7f.1`, `2130706433`, `0177.1`) are read the way it reads them, and host names are
resolved and every answer is checked. `server.alarms.safe_http` then connects to exactly those
checked addresses, so a second DNS answer cannot send the request elsewhere.

Embedded IPv4 (decided here, for every IPv6 form that carries one): an IPv4-mapped address
(`::ffff:a.b.c.d`) is that IPv4 address and is judged (and connected to) as such; NAT64
(`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses reach the IPv4 address they embed, so they are
refused when that address is, and allowed when it is public or allow-listed; deprecated
IPv4-compatible addresses (`::a.b.c.d`) are refused as reserved unless the allow-list covers the
embedded address; Teredo and the rest of `2001::/23` are refused.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from server.errors import UnsafeTarget

__all__ = [
    "DEFAULT_POLICY",
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "IPAddress",
    "Resolver",
    "Target",
    "TargetPolicy",
    "UnsafeTarget",
    "check_url",
    "checked_addresses",
    "parse_target",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Iterable[str]]
"""Answers the addresses of a host name (the name as written in the URL, and the port)."""

SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}

METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data"}
    | {"instance-data.ec2.internal", "metadata.tencentyun.com"}
)
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
_FORBIDDEN_IN_URL = re.compile(r"[\\\s\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL.

    `url` is the client's own parse, so the check and the request can never read the URL
    differently; `host` is its ASCII host (IDNA-encoded, lower-case, IPv6 without brackets);
    `name` is the host name for comparisons (no trailing dot), `None` for an address literal;
    `address` is the address a literal denotes, in whatever spelling it was written.
    """

    url: httpx.URL
    host: str
    port: int
    name: str | None
    address: IPAddress | None


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
                if "/" in entry or ":" in entry or _parse_loose_ipv4(entry) is not None:
                    raise ValueError(f"--webhook-allow {raw!r}: not a valid CIDR ({exc})") from exc
            name = _host_name(entry)
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


def _parse_loose_ipv4(text: str) -> ipaddress.IPv4Address | None:
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


def _host_name(text: str) -> str | None:
    """`text` as a comparable host name (lower-case, one trailing dot dropped), or `None`."""
    name = text.lower().removesuffix(".")
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        return None
    if _NUMBER.match(labels[-1]):
        return None  # ends in a number: an address spelling, never a name
    return name


def _malformed(why: str, host: str = "") -> UnsafeTarget:
    return UnsafeTarget(f"not a usable webhook URL: {why}", reason="malformed", host=host)


def parse_target(url: str) -> Target:
    """Parse a webhook URL the way the HTTP client will, refusing anything ambiguous.

    Refused: schemes other than http(s); userinfo (`http://good.com@127.0.0.1/` — parsers
    disagree on where it ends, and credentials would sit in clear in the stored URL);
    backslashes, spaces and control characters; IPv6 zone ids; host names with characters
    outside letters, digits, `-`, `_` and `.`, or whose last label is a number but that do not
    spell an IPv4 address.
    """
    if _FORBIDDEN_IN_URL.search(url):
        raise _malformed("backslashes, spaces and control characters are not allowed")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise _malformed(str(exc)) from exc
    if parsed.scheme not in SCHEMES:
        raise UnsafeTarget("webhook URLs must be http:// or https://", reason="scheme")
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise _malformed("no host")
    if parsed.userinfo:
        raise UnsafeTarget(
            "webhook URLs may not carry credentials (user:password@)",
            reason="credentials",
            host=host,
        )
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    if ":" in host:
        if "%" in host:
            raise _malformed("IPv6 zone ids are not allowed", host)
        return Target(parsed, host, port, None, ipaddress.IPv6Address(host))
    bare = host.removesuffix(".")
    if _NUMBER.match(bare.rsplit(".", 1)[-1]):
        address = _parse_loose_ipv4(bare)
        if address is None:
            raise _malformed(f"{host} is not a valid IPv4 address", host)
        return Target(parsed, host, port, None, address)
    name = _host_name(host)
    if name is None:
        raise _malformed(f"{host} is not a valid host name", host)
    return Target(parsed, host, port, name, None)


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the operating system's resolver answers for `host` (TCP)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def checked_addresses(
    target: Target, policy: TargetPolicy, resolver: Resolver | None
) -> list[IPAddress]:
    """The addresses `target` will be connected to, each allowed by `policy`, in answer order.

    A host name is resolved once here (an `OSError` from the resolver propagates, so callers
    decide whether that is final or worth a retry). If any answer is refused, the whole target
    is: a name that mixes public and private answers is either misconfigured or built to slip a
    private address past a check that looks at one answer, and dropping the bad answers would
    silently change where messages go. With `resolver=None` names are not resolved (only the
    checks on the name run) and the list is empty.
    """
    if target.name is not None and target.name in METADATA_HOSTS:
        raise UnsafeTarget(
            f"{target.host} is a cloud metadata host", reason="metadata", host=target.host
        )
    if target.address is not None:
        answers: list[IPAddress] = [target.address]
    elif resolver is None:
        return []
    else:
        answers = []
        for text in resolver(target.host, target.port):
            try:
                address = unmapped(ipaddress.ip_address(text))
            except ValueError as exc:
                raise _malformed("unusable resolver answer", target.host) from exc
            if address not in answers:
                answers.append(address)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, f"no addresses for {target.host}")
    for address in answers:
        reason = policy.refusal(address, name=target.name)
        if reason is not None:
            raise _refused(target, reason)
    return [unmapped(a) for a in answers]


def _refused(target: Target, reason: str) -> UnsafeTarget:
    """The error for a refused target; it names the address only when the user wrote it."""
    subject = target.host
    if target.address is not None and str(target.address) != target.host:
        subject += f" ({unmapped(target.address)})"
    words = "cloud metadata" if reason == "metadata" else reason
    article = "an" if words[0] in "aeiou" else "a"
    verb = "is" if target.name is None else "resolves to"
    message = f"{subject} {verb} {article} {words} address"
    if reason not in ("metadata", "scoped link-local"):
        message += "; a deployment can allow it with --webhook-allow"
    return UnsafeTarget(message, reason=reason, host=target.host)


def check_url(
    url: str, policy: TargetPolicy, *, resolver: Resolver | None = None
) -> list[IPAddress]:
    """Check a webhook URL against `policy` and return the addresses it resolves to now.

    Used when a receiver is created, to give the user an early, clear error; delivery checks
    again, against the addresses it actually connects to (`safe_http.post`). Raises
    `UnsafeTarget`, also when the host cannot be resolved.
    """
    target = parse_target(url)
    try:
        return checked_addresses(target, policy, resolver or system_resolver)
    except OSError as exc:
        raise UnsafeTarget(
            f"cannot resolve {target.host}", reason="unresolvable", host=target.host
        ) from exc
