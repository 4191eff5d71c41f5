"""Migration 0017 carries people's mappings, tokens and the record of changes from shown names
to ids on both databases, and nobody can do more after it than before: an address mapped as a
user becomes an e-mail mapping (matched only where verified), any other user name that subject,
a token keeps exactly what it matched, a change once recorded by a shown name says so."""

from __future__ import annotations

import json

import sqlalchemy as sa

from server import auth
from server.domain.identity import PROXY_ISSUER, Person
from server.identity.members import Members
from server.identity.personal_tokens import PersonalTokens
from server.storage.db import Database
from server.storage.schema import migrate

ISSUER = "https://sso.lab.example"


def _seed_0014(db: Database) -> str:
    """What a server of 0014 stored: mappings by name, a token by names, changes by a shown
    name, a session. Returns the token's secret."""
    new = auth.new_token(prefix="p")
    member = "INSERT INTO members VALUES ({}, 1, 'open')"
    rows = [
        (member.format("'user', 'alice@lab.example', 'alpha', 'read'"), {}),
        (member.format("'user', 'u-erin', 'beta', 'admin'"), {}),
        (member.format("'group', 'team', 'gamma', 'read'"), {}),
        (
            "INSERT INTO personal_tokens (id, owner, names, name, salt, hash, created_at, "
            "created_by, revoked_at) VALUES (:id, 'alice@lab.example', :names, 'nb', :salt, "
            ":hash, 1, 'user:alice@lab.example', NULL)",
            {"id": new.id, "names": json.dumps(["u-alice", "alice@lab.example"]),
             "salt": new.salt, "hash": new.hash},
        ),
        (
            "INSERT INTO changes VALUES ('c1', 1, 'alpha', 'rule', 'r1', 'create', "
            "'user:token 28aee556d1f2', '')",
            {},
        ),
        (
            "INSERT INTO changes VALUES "
            "('c2', 2, 'alpha', 'rule', 'r1', 'update', 'token:abc', '')",
            {},
        ),
        (
            "INSERT INTO user_sessions VALUES ('h', :names, '[]', 'alice', 1, 9e12, 9e12)",
            {"names": json.dumps(["u-alice"])},
        ),
    ]  # fmt: skip
    with db.write() as conn:
        for statement, values in rows:
            conn.execute(sa.text(statement), values)
    return new.token


def test_people_move_to_ids_without_widening_anyones_access(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate.upgrade(db, "0016")
        presented = _seed_0014(db)
        migrate.upgrade(db)
        members = Members(db)
        stored = {(m.kind, m.name, m.project) for m in members.list()}
        assert stored == {
            ("email", "alice@lab.example", "alpha"),
            ("user", "*#u-erin", "beta"),
            ("group", "team", "gamma"),
        }

        def grants(person: Person) -> object:
            return members.principal(person).grants

        alice = Person(ISSUER, "u-alice", "alice@lab.example", (), "alice")
        assert grants(alice) == (("alpha", "read"),)
        # The address as a subject, or as a name the person picked, is nobody's e-mail.
        assert grants(Person(ISSUER, "alice@lab.example", None, (), "alice@lab.example")) == ()
        assert grants(Person(ISSUER, "u-erin", None, (), "erin")) == (("beta", "admin"),)
        assert grants(Person(PROXY_ISSUER, "pat@lab.example", "pat@lab.example", (), "")) == ()

        token_id, secret = auth.split_token(presented) or ("", "")
        personal = PersonalTokens(db, members)
        acting = personal.authenticate(token_id, secret)
        assert acting.grants == (("alpha", "read"),)
        assert acting.person is not None and acting.person.id == "*#u-alice"
        # Listed only under the id it was carried to, never under a shown name.
        assert personal.list(owner="alice@lab.example") == []
        assert [t.id for t in personal.list(owner="*#u-alice")] == [token_id]

        with db.read() as conn:
            changes = dict(conn.execute(sa.text("SELECT id, actor FROM changes")).all())
            sessions = conn.execute(sa.text("SELECT count(*) FROM user_sessions")).scalar()
        assert changes == {"c1": "name:token 28aee556d1f2", "c2": "token:abc"}
        assert sessions == 0

        migrate.downgrade(db, "0016")
        with db.read() as conn:
            back = set(conn.execute(sa.text("SELECT kind, name, project FROM members")).all())
            names = conn.execute(sa.text("SELECT names FROM personal_tokens")).scalar_one()
        assert back == {
            ("user", "alice@lab.example", "alpha"),
            ("user", "u-erin", "beta"),
            ("group", "team", "gamma"),
        }
        assert json.loads(names) == ["u-alice", "alice@lab.example"]
        migrate.upgrade(db)
    finally:
        db.dispose()
