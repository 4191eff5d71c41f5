"""The auth-proxy mode: a proxy in front (oauth2-proxy, a cloud identity-aware proxy) signs
people in and names them in a header. The header is believed only from the proxy's configured
addresses; the same header from anywhere else is refused outright (403), since only someone
trying to pass for another person sends it there. Without the header the usual sign-in applies.

The address is the TCP peer's, never a forwarded-for header: the server must not run behind
another proxy that rewrites the peer (`mismatch serve` turns uvicorn's proxy headers off in
this mode).

The person is the header's value at the issuer `proxy` (`proxy#alice`); a value that is an
e-mail address also counts as their verified e-mail, since the proxy signed them in with it
(oauth2-proxy passes verified addresses only, unless told otherwise).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from server.domain.identity import MAX_SUBJECT, PROXY_ISSUER, Person
from server.errors import Forbidden, Malformed

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_GROUPS = 200


class ProxyTrust:
    def __init__(
        self, *, header: str, groups_header: str | None, networks: Sequence[Network]
    ) -> None:
        self.header = header.lower()
        self.groups_header = groups_header.lower() if groups_header else None
        self.networks = tuple(networks)

    def person(self, user: str | None, groups: str | None, peer: str | None) -> Person | None:
        """The person the proxy names, None when the header is absent; Forbidden when a
        client that is not the proxy sends it."""
        if user is None:
            return None
        if not self.trusts(peer):
            raise Forbidden(
                f"the {self.header} header is accepted only from the sign-in proxy's "
                "addresses (--auth-proxy-from); send the request through the proxy"
            )
        name = user.strip()
        if not name:
            return None
        if len(name) > MAX_SUBJECT:
            raise Malformed(f"the {self.header} header is longer than {MAX_SUBJECT} characters")
        named = [g.strip() for g in (groups or "").split(",") if g.strip()][:MAX_GROUPS]
        email = name if "@" in name else None
        return Person(PROXY_ISSUER, name, email, tuple(named), name)

    def trusts(self, peer: str | None) -> bool:
        if peer is None:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)
