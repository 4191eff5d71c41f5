"""People's own API tokens, for their scripts and notebooks: a token that belongs to a person
and acts, at each request, with the projects and roles that the mappings naming that person
give (`Members.principal`, as their sign-in does). It has no project or scope of its own, so
removing the person's mappings ends it at its next request, and it never ingests.

A signed-in person makes their own (`POST /api/v1/me/tokens`), the server admin makes one for
a person on the command line (`mismatch token create --user ISSUER#SUBJECT`, against the
database). A token belongs to its person's id, never to a name they chose: only they list and
revoke it. Groups are known only at a sign-in (the provider's claim, the proxy's header), so a
token acts with the mappings that name the person themself (by id or verified e-mail), not
their groups'.
"""

from __future__ import annotations

import time
from dataclasses import replace

from server import auth
from server.domain.identity import PERSONAL_PREFIX, Person, PersonalToken, split_person_id
from server.errors import Forbidden, NotFound, Rejected, Unauthorized
from server.identity.members import Members, add_member_hint, checked_name
from server.storage.db import Database
from server.storage.identity import personal_tokens as stored


def is_personal(token_id: str) -> bool:
    """Whether a presented token's id is a personal token's (machine tokens' are hex)."""
    return token_id.startswith(PERSONAL_PREFIX)


class PersonalTokens:
    def __init__(self, db: Database, members: Members) -> None:
        self._db = db
        self._members = members

    def create(
        self, *, by: auth.Principal, name: str = "", user: str | None = None
    ) -> tuple[PersonalToken, str]:
        """A new token of the person `by` (signed in, not through a token), or, where nobody
        asks (the command line, against the database), of the person whose id is `user`
        (`ISSUER#SUBJECT`). Refused while no project is mapped to the person itself (by id or
        verified e-mail): the token could do nothing."""
        if by is auth.OPEN:
            owner = checked_name("user", user or "")
            issuer, subject = split_person_id(owner) or ("", "")
            person = Person(issuer, subject, None, (), owner)
        elif by.person is None or by.token_id is not None:
            raise Forbidden(
                "a personal token belongs to a person: sign in through the identity provider "
                "or the auth proxy and ask for one there (machine tokens: POST /api/v1/tokens)"
            )
        else:
            person = replace(by.person, groups=())
        acts = self._members.principal(person)
        if not (acts.is_server_admin or acts.grants):
            raise Rejected(
                f"no project is mapped to {person.shown} ({person.id}) itself (a token knows no "
                f"groups): {add_member_hint(person)}"
            )
        new = auth.new_token(prefix=PERSONAL_PREFIX)
        token = PersonalToken(
            new.id, person.id, person.email, person.shown, name[:200], time.time(), by.actor, None
        )
        with self._db.write() as conn:
            stored.insert(conn, token, salt=new.salt, hash=new.hash)
        return token, new.token

    def authenticate(self, token_id: str, secret: str) -> auth.Principal:
        """The person a presented personal token acts for, with their mappings as they are
        now (none: a principal without grants, which the resolver refuses)."""
        with self._db.read() as conn:
            found = stored.credentials(conn, token_id)
        if found is None or not auth.verify(secret, salt=found[1], stored_hash=found[2]):
            raise Unauthorized("invalid token")
        token = found[0]
        if token.revoked_at is not None:
            raise Unauthorized("this token was revoked")
        return replace(self._members.principal(token.person), token_id=token_id)

    def list(self, *, owner: str | None, include_revoked: bool = False) -> list[PersonalToken]:
        """The tokens of the person whose id is `owner` (None: everybody's, for the command
        line)."""
        with self._db.read() as conn:
            return stored.listed(conn, owner=owner, include_revoked=include_revoked)

    def revoke(self, token_id: str, *, owner: str | None) -> PersonalToken:
        """Revoke a token of the person whose id is `owner` (None: anybody's); another
        person's is as unknown as a missing one."""
        with self._db.write() as conn:
            found = stored.get(conn, token_id)
            if found is None or (owner is not None and found.owner != owner):
                raise NotFound(f"no personal token {token_id!r} of yours")
            stored.revoke(conn, token_id, now=time.time())
            revoked = stored.get(conn, token_id)
        assert revoked is not None  # the row was there a statement ago, in this transaction
        return revoked
