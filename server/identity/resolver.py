"""Who a request is, from whatever it carries: one path for the API, the dashboard's gate,
/metrics and the body budget, so they cannot drift.

In order: the auth proxy's header (refused outright from an address that is not the proxy's),
the bearer token (machine tokens, unchanged; a person's own token acts as that person, with
their mappings as they are now), then the person the proxy names, then the session cookie (a
token's session or a person's). A person without any mapped project is refused (403) with what
to ask for, at every request: removing a mapping takes effect at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from server import auth
from server.errors import Forbidden, Malformed
from server.identity.members import Members, add_member_hint
from server.identity.personal_tokens import PersonalTokens, is_personal
from server.identity.proxy import ProxyTrust
from server.identity.sessions import UserSessions
from server.services.sessions import COOKIE, Sessions, cookie_value
from server.services.tokens import TokenService


@dataclass(frozen=True)
class Resolved:
    principal: auth.Principal
    session: bool = False  # a session cookie stands behind it (so "Sign out" means something)
    refreshed: str | None = None  # a Set-Cookie value that pushes the session on


class Identity:
    def __init__(
        self,
        *,
        tokens: TokenService,
        sessions: Sessions,
        people: UserSessions,
        members: Members,
        proxy: ProxyTrust | None = None,
        personal: PersonalTokens | None = None,
    ) -> None:
        self.tokens = tokens
        self.sessions = sessions
        self.people = people
        self.members = members
        self.proxy = proxy
        self.personal = personal

    def resolve_scope(self, scope: Mapping[str, Any]) -> Resolved:
        """`resolve` for an ASGI request scope. Blocking: run it off the event loop. Malformed
        (400) when a header that names the caller is sent twice or is not UTF-8."""
        headers = _headers(scope, self.identity_headers())
        client = scope.get("client")
        return self.resolve(
            authorization=headers.get("authorization"),
            cookie=cookie_value(headers.get("cookie"), COOKIE),
            headers=headers,
            peer=str(client[0]) if client else None,
        )

    def resolve(
        self,
        *,
        authorization: str | None,
        cookie: str | None,
        headers: Mapping[str, str] | None = None,
        peer: str | None = None,
    ) -> Resolved:
        """The caller, or Unauthorized (no or bad credentials) / Forbidden (a proxy header
        from elsewhere, a person with no project)."""
        person = None
        if self.proxy is not None and headers is not None:
            groups = headers.get(self.proxy.groups_header) if self.proxy.groups_header else None
            person = self.proxy.person(headers.get(self.proxy.header), groups, peer)
        if not self.tokens.auth_enabled():
            return Resolved(auth.OPEN)
        if authorization:
            return Resolved(self._bearer(authorization))
        if person is not None:
            return Resolved(self._person(self.members.principal(person)))
        if cookie:
            principal = self.sessions.principal(cookie)
            if principal is not None:
                return Resolved(principal, session=True)
            found = self.people.read(cookie)
            if found is not None:
                principal = self._person(self.members.principal(found.person))
                return Resolved(principal, session=True, refreshed=found.refreshed)
        return Resolved(self.tokens.authenticate(None))  # raises: the usual 401 and its words

    def _bearer(self, authorization: str) -> auth.Principal:
        """A machine token's principal, or a personal token's person (refused, like their
        sign-in, while no project is mapped to them)."""
        scheme, _, value = authorization.partition(" ")
        parts = auth.split_token(value) if scheme.lower() == "bearer" else None
        if parts is not None and self.personal is not None and is_personal(parts[0]):
            return self._person(self.personal.authenticate(*parts))
        return self.tokens.authenticate(authorization)

    def identity_headers(self) -> frozenset[str]:
        """The headers that say who the caller is (lower case): each may come once only."""
        named = {"authorization"}
        if self.proxy is not None:
            named.add(self.proxy.header)
            if self.proxy.groups_header:
                named.add(self.proxy.groups_header)
        return frozenset(named)

    def end(self, cookie: str | None) -> None:
        """Sign out: end whichever session the cookie names."""
        if not self.sessions.end(cookie):
            self.people.end(cookie)

    @staticmethod
    def _person(principal: auth.Principal) -> auth.Principal:
        if principal.is_server_admin or principal.grants:
            return principal
        person = principal.person
        assert person is not None  # built by `Members.principal`, which always sets it
        raise Forbidden(
            f"signed in as {person.shown} ({person.id}), but no project is mapped to you: "
            f"{add_member_hint(person)}"
        )


def _headers(scope: Mapping[str, Any], identity: frozenset[str]) -> dict[str, str]:
    """The request's headers by lower-case name (the first of other repeated ones).

    A header in `identity` sent twice is refused: a proxy that appends its own value to the
    client's, instead of replacing it, would otherwise let the client's (the first) win. Their
    values are read as UTF-8, which is what proxies send for names beyond ASCII (oauth2-proxy,
    Pomerium, the cloud providers' identity-aware proxies pass the provider's claim's bytes);
    a value that is not UTF-8 is refused rather than read as another name."""
    out: dict[str, str] = {}
    for key, value in scope.get("headers", []):
        name = bytes(key).decode("latin-1").lower()
        if name not in identity:
            out.setdefault(name, bytes(value).decode("latin-1"))
        elif name in out:
            raise Malformed(
                f"the {name} header was sent more than once; a request names one caller (a "
                "proxy in front must replace this header, never append to it)"
            )
        else:
            try:
                out[name] = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise Malformed(f"the {name} header is not UTF-8") from None
    return out
