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
resolved and every answer is checked. `server.alarms.delivering.safe_http` then connects to exactly
those checked addresses, so a second DNS answer cannot send the request elsewhere.

Embedded IPv4 forms (an IPv4-mapped, NAT64, 6to4 or IPv4-compatible IPv6 address) are judged
by the IPv4 address they reach, as `server.domain.webhook_policy` decides.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from server.domain.webhook_policy import (
    DEFAULT_POLICY,
    METADATA_ADDRESSES,
    IPAddress,
    TargetPolicy,
    comparable_host_name,
    ends_in_number,
    parse_loose_ipv4,
    unmapped,
)
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

Resolver = Callable[[str, int], Iterable[str]]
"""Answers the addresses of a host name (the name as written in the URL, and the port)."""

SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}

METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data"}
    | {"instance-data.ec2.internal", "metadata.tencentyun.com"}
)
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
    if ends_in_number(bare):
        address = parse_loose_ipv4(bare)
        if address is None:
            raise _malformed(f"{host} is not a valid IPv4 address", host)
        return Target(parsed, host, port, None, address)
    name = comparable_host_name(host)
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
