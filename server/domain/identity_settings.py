"""Checks of the identity settings, run when the settings are read: a wrong issuer or a proxy
header without trusted addresses stops the server with a message naming the setting, instead of
failing a person's first sign-in. Pure, so that the settings import no feature module; the
mapping file (`--identity-map`) is read, and checked, where the identity wiring starts."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")


class IdentitySettings(Protocol):
    """The settings these checks read (the server's `Settings` has them)."""

    @property
    def oidc_issuer(self) -> str | None: ...
    @property
    def oidc_client_id(self) -> str | None: ...
    @property
    def oidc_scopes(self) -> str: ...
    @property
    def auth_proxy_header(self) -> str | None: ...
    @property
    def auth_proxy_groups_header(self) -> str | None: ...
    @property
    def auth_proxy_from(self) -> Sequence[str]: ...


def check(settings: IdentitySettings) -> None:
    """Raise ValueError for an identity setting that cannot work."""
    if settings.oidc_issuer is not None:
        _check_issuer(settings.oidc_issuer)
        if not settings.oidc_client_id:
            raise ValueError("--oidc-issuer needs --oidc-client-id (MISMATCH_OIDC_CLIENT_ID)")
        if "openid" not in settings.oidc_scopes.split():
            raise ValueError("--oidc-scopes must include openid")
    for name in (settings.auth_proxy_header, settings.auth_proxy_groups_header):
        if name is not None and not HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a header name (letters, digits and -)")
    trusted_networks(settings.auth_proxy_from)
    if settings.auth_proxy_header and not settings.auth_proxy_from:
        raise ValueError(
            "--auth-proxy-header needs --auth-proxy-from: the proxy's addresses (CIDRs), so "
            "that nobody else can name a user"
        )
    if settings.auth_proxy_groups_header and not settings.auth_proxy_header:
        raise ValueError("--auth-proxy-groups-header needs --auth-proxy-header")


def _check_issuer(issuer: str) -> None:
    parts = urlsplit(issuer)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--oidc-issuer {issuer!r} is not an http(s) URL")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ValueError(
            f"--oidc-issuer {issuer!r} must be https (plain http only for an issuer on loopback)"
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def trusted_networks(
    entries: Sequence[str],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """The `--auth-proxy-from` CIDRs (a bare address is a /32 or /128). An IPv4-mapped IPv6
    network (`::ffff:10.0.0.5`, `::ffff:10.0.0.0/120`) is its IPv4 network: a peer is matched
    by its IPv4 address however the socket reports it."""
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in entries:
        try:
            out.append(_unmapped(ipaddress.ip_network(entry.strip(), strict=False)))
        except ValueError:
            raise ValueError(
                f"--auth-proxy-from {entry!r} is not an address or CIDR (e.g. 10.0.0.5/32)"
            ) from None
    return tuple(out)


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _unmapped(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None  # inside ::ffff:0:0/96
        return ipaddress.IPv4Network(f"{mapped}/{network.prefixlen - 96}")
    return network
