"""The tables of people (migration 0011): who is mapped to which project with which role, the
sessions of people signed in through OpenID Connect, the sign-ins under way, and the record of
who changed what; and people's own API tokens (migration 0012). Since migration 0017 a person
is their issuer and subject everywhere (`server.domain.identity.person_id`)."""

from __future__ import annotations

import sqlalchemy as sa

from server.storage.schema.tables import metadata

members = sa.Table(
    "members",
    metadata,
    sa.Column("kind", sa.String(8), primary_key=True),  # user | email | group
    sa.Column("name", sa.String(600), primary_key=True),  # ISSUER#SUBJECT, e-mail or group
    sa.Column("project", sa.String(128), primary_key=True),  # or "*": a server admin
    sa.Column("role", sa.String(8), nullable=False),  # read | admin
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("created_by", sa.String(600), nullable=False),
)

user_sessions = sa.Table(
    "user_sessions",
    metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),  # SHA-256 of the cookie's session id
    sa.Column("issuer", sa.String(400), nullable=False),
    sa.Column("subject", sa.String(400), nullable=False),
    sa.Column("email", sa.String(320), nullable=True),  # verified by the provider, else NULL
    sa.Column("groups", sa.Text, nullable=False),  # JSON: the groups claim at sign-in
    sa.Column("shown", sa.String(320), nullable=False),  # display only
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("expires_at", sa.Float(53), nullable=False),  # pushed on while in use
    sa.Column("ends_at", sa.Float(53), nullable=False),  # never pushed: sign in again then
)

oidc_logins = sa.Table(
    "oidc_logins",
    metadata,
    sa.Column("state_hash", sa.String(64), primary_key=True),  # SHA-256 of the state sent
    sa.Column("nonce", sa.String(128), nullable=False),
    sa.Column("verifier", sa.String(128), nullable=False),  # the PKCE code verifier
    sa.Column("next_path", sa.Text, nullable=False),
    sa.Column("expires_at", sa.Float(53), nullable=False),
)

changes = sa.Table(
    "changes",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("changed_at", sa.Float(53), nullable=False),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("object_id", sa.String(600), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("actor", sa.String(600), nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("actor_name", sa.String(320), nullable=True),  # shown beside actor; display only
)
"""Who changed a project's rules, receivers, silences, reference, retention, tokens and
members: a row per change, never updated."""

sa.Index("changes_by_project", changes.c.project, changes.c.changed_at)

personal_tokens = sa.Table(
    "personal_tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),  # "p…": the token's public id
    sa.Column("owner", sa.String(600), nullable=False),  # the person's id, ISSUER#SUBJECT
    sa.Column("name", sa.String(200), nullable=False),  # a note to recognise it by
    sa.Column("salt", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(128), nullable=False),  # salted SHA-256 of the secret
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("created_by", sa.String(600), nullable=False),
    sa.Column("revoked_at", sa.Float(53), nullable=True),
    sa.Column("email", sa.String(320), nullable=True),  # the person's verified e-mail
    sa.Column("shown", sa.String(320), nullable=True),  # the person's shown name; display only
)
"""People's own API tokens: each acts with its person's mappings at each request, never with
a project or scope of its own."""

sa.Index("personal_tokens_by_owner", personal_tokens.c.owner)
