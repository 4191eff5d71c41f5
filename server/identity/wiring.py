"""The people side of the server, built once by the composition root: the mappings, the record
of changes, people's sessions, the OIDC client (when an issuer is configured) and the resolver
every request goes through."""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.config import Settings
from server.domain.identity_settings import trusted_networks
from server.identity.changes import Changes
from server.identity.mapfile import load
from server.identity.members import Members
from server.identity.oidc import OidcClient
from server.identity.personal_tokens import PersonalTokens
from server.identity.proxy import ProxyTrust
from server.identity.resolver import Identity
from server.identity.sessions import UserSessions
from server.identity.signin import SignIn
from server.services.sessions import Sessions
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.identity import secrets as server_secrets

CALLBACK_PATH = "/login/oidc/callback"


@dataclass
class People:
    members: Members
    changes: Changes
    sessions: UserSessions
    identity: Identity
    signin: SignIn | None  # None without --oidc-issuer
    personal: PersonalTokens


def build(settings: Settings, db: Database, *, tokens: TokenService, sessions: Sessions) -> People:
    members = Members(db, mapped=load(settings.identity_map) if settings.identity_map else None)
    secure = settings.base_url.startswith("https://")

    def secret() -> str:
        return server_secrets.load_or_create(db, "session")

    people = UserSessions(db, secret, ttl_s=settings.session_ttl_s, secure=secure, clock=time.time)
    proxy = None
    if settings.auth_proxy_header:
        proxy = ProxyTrust(
            header=settings.auth_proxy_header,
            groups_header=settings.auth_proxy_groups_header,
            networks=trusted_networks(settings.auth_proxy_from),
        )
    signin = None
    if settings.oidc_issuer and settings.oidc_client_id:
        client = OidcClient(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret,
            scopes=settings.oidc_scopes,
            redirect_uri=settings.base_url + CALLBACK_PATH,
            groups_claim=settings.oidc_groups_claim,
        )
        signin = SignIn(client, db, people, secret, secure=secure)
    personal = PersonalTokens(db, members)
    identity = Identity(
        tokens=tokens,
        sessions=sessions,
        people=people,
        members=members,
        proxy=proxy,
        personal=personal,
    )
    return People(members, Changes(db), people, identity, signin, personal)
