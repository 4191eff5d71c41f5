"""People are their issuer and subject: user mappings name a person's id (`ISSUER#SUBJECT`),
verified e-mail addresses get mappings of their own kind, personal tokens belong to an id, and
the record of changes names a person by id with their shown name beside it. A shown name (the
`preferred_username` a person picks) no longer decides anything.

What was stored is carried over without widening anyone's access (`_legacy_user`):
- a user mapping whose name has an "@" matched verified e-mails (and proxy names): it becomes
  an e-mail mapping; any other named a subject: it becomes `*#NAME`, that subject at any
  issuer the server trusts. A subject with an "@" loses its match: narrower, never wider.
- a personal token's names were (subject[, verified e-mail]): it belongs to `*#SUBJECT` with
  that e-mail, so it matches the carried-over mappings it matched before, and none made from
  now on by id. Its owner lists and revokes it on the command line (`mismatch token revoke`);
  through the API, a person's own list shows the tokens made under their id.
- a change made by `user:NAME` is kept as `name:NAME`: the shown name it recorded, marked as
  one, never read as a person's id.
- people's sessions end: everyone signs in once more.

How a stored name is carried over and how a person's id is read are written out here, frozen,
not imported from the server's domain code: a revision replays the same change whatever later
versions of that code say (`server/domain/identity.py` is the live reading).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_members = sa.table(
    "members",
    *(sa.column(c) for c in ("kind", "name", "project", "role", "created_at", "created_by")),
)
_tokens = sa.table(
    "personal_tokens", *(sa.column(c) for c in ("id", "owner", "names", "email", "shown"))
)
_changes = sa.table("changes", *(sa.column(c) for c in ("id", "actor", "actor_name")))
WIDER = {
    "members": ("name", "created_by"),
    "personal_tokens": ("owner", "created_by"),
    "changes": ("object_id", "actor"),
}
"""Columns that hold a person's id now (up to 511 characters, with a kind before it)."""
_ANY_ISSUER = "*"
"""The issuer of what was stored before issuers: `*#SUBJECT`, that subject at any issuer."""


def _legacy_user(name: str) -> tuple[str, str]:
    """(kind, name) of a user mapping stored before issuers, never wider than it was: a name
    with an "@" becomes an e-mail mapping, any other that subject at any issuer."""
    return ("email", name) if "@" in name else ("user", f"{_ANY_ISSUER}#{name}")


def _split_person_id(value: str) -> tuple[str, str] | None:
    """(issuer, subject) of a person id `ISSUER#SUBJECT`, None when `value` is not one."""
    issuer, sep, subject = value.partition("#")
    return (issuer, subject) if sep and issuer and subject else None


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":  # DuckDB's VARCHAR has no length to change
        for table, columns in WIDER.items():
            for column in columns:
                op.alter_column(table, column, type_=sa.String(600))
    _members_by_kind(conn)
    _tokens_by_id(conn)
    _changes_by_id(conn)
    op.drop_table("user_sessions")
    _sessions(
        sa.Column("issuer", sa.String(400), nullable=False),
        sa.Column("subject", sa.String(400), nullable=False),
        sa.Column("email", sa.String(320), nullable=True),
    )


def _members_by_kind(conn: sa.Connection) -> None:
    rows = conn.execute(sa.select(_members).where(_members.c.kind == "user")).mappings().all()
    for row in rows:
        kind, name = _legacy_user(row["name"])
        key = (_members.c.kind == "user", _members.c.name == row["name"])
        conn.execute(sa.delete(_members).where(*key, _members.c.project == row["project"]))
        conn.execute(sa.insert(_members).values({**row, "kind": kind, "name": name}))


def _tokens_by_id(conn: sa.Connection) -> None:
    op.drop_index("personal_tokens_by_owner", table_name="personal_tokens")
    op.add_column("personal_tokens", sa.Column("email", sa.String(320), nullable=True))
    op.add_column("personal_tokens", sa.Column("shown", sa.String(320), nullable=True))
    rows = conn.execute(sa.select(_tokens.c.id, _tokens.c.owner, _tokens.c.names)).all()
    for token_id, owner, names_text in rows:
        names = [str(n) for n in json.loads(names_text or "[]")] or [owner]
        subject = names[0]
        email = names[1] if len(names) > 1 else (subject if "@" in subject else None)
        conn.execute(
            sa.update(_tokens)
            .where(_tokens.c.id == token_id)
            .values(owner=f"{_ANY_ISSUER}#{subject}", email=email, shown=owner)
        )
    op.drop_column("personal_tokens", "names")
    op.create_index("personal_tokens_by_owner", "personal_tokens", ["owner"])


def _changes_by_id(conn: sa.Connection) -> None:
    op.add_column("changes", sa.Column("actor_name", sa.String(320), nullable=True))
    rows = conn.execute(sa.select(_changes.c.id, _changes.c.actor)).all()
    for change_id, actor in rows:
        if actor.startswith("user:"):
            name = actor[len("user:") :]
            conn.execute(
                sa.update(_changes)
                .where(_changes.c.id == change_id)
                .values(actor=f"name:{name}", actor_name=name[:320])
            )


def _sessions(*person: sa.Column[str]) -> None:
    op.create_table(
        "user_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        *person,
        sa.Column("groups", sa.Text, nullable=False),
        sa.Column("shown", sa.String(320), nullable=False),
        sa.Column("created_at", sa.Float(53), nullable=False),
        sa.Column("expires_at", sa.Float(53), nullable=False),
        sa.Column("ends_at", sa.Float(53), nullable=False),
    )


def downgrade() -> None:
    """Back to names: a user mapping by id becomes its subject, an e-mail mapping a user
    mapping (which matches as widely as before the upgrade); sessions end again."""
    conn = op.get_bind()
    op.drop_table("user_sessions")
    _sessions(sa.Column("names", sa.Text, nullable=False))
    rows = conn.execute(sa.select(_changes.c.id, _changes.c.actor, _changes.c.actor_name)).all()
    for change_id, actor, actor_name in rows:
        kind, _, rest = actor.partition(":")
        if kind in ("name", "person"):
            old = f"user:{actor_name or rest}"
            conn.execute(sa.update(_changes).where(_changes.c.id == change_id).values(actor=old))
    op.drop_index("changes_by_project", table_name="changes")
    op.drop_column("changes", "actor_name")
    op.create_index("changes_by_project", "changes", ["project", "changed_at"])
    op.drop_index("personal_tokens_by_owner", table_name="personal_tokens")
    op.add_column("personal_tokens", sa.Column("names", sa.Text, nullable=True))
    found = conn.execute(sa.select(_tokens.c.id, _tokens.c.owner, _tokens.c.email, _tokens.c.shown))
    for token_id, owner, email, shown in found.all():
        subject = (_split_person_id(owner) or ("", owner))[1]
        names = [subject] + ([email] if email and email != subject else [])
        values = {"names": json.dumps(names), "owner": shown or subject}
        conn.execute(sa.update(_tokens).where(_tokens.c.id == token_id).values(**values))
    op.drop_column("personal_tokens", "email")
    op.drop_column("personal_tokens", "shown")
    op.create_index("personal_tokens_by_owner", "personal_tokens", ["owner"])
    rows = conn.execute(sa.select(_members).where(_members.c.kind != "group")).mappings().all()
    for row in rows:
        name = (
            row["name"]
            if row["kind"] == "email"
            else (_split_person_id(row["name"]) or ("", row["name"]))[1]
        )
        conn.execute(
            sa.delete(_members).where(
                _members.c.kind == row["kind"],
                _members.c.name == row["name"],
                _members.c.project == row["project"],
            )
        )
        taken = sa.select(_members.c.name).where(
            _members.c.kind == "user", _members.c.name == name, _members.c.project == row["project"]
        )
        if conn.execute(taken).first() is None:
            conn.execute(sa.insert(_members).values({**row, "kind": "user", "name": name}))
