"""A small OpenID Connect provider for tests, built with Authlib's own authorization server (the
authorization code grant, OpenID Connect's ID token, PKCE required) and served by a real uvicorn
on a loopback port: its login page is a form a browser fills in, its keys are published as a
JWKS, and nothing outside the machine is reached.

`forging` makes it issue ID tokens a client must refuse: with another nonce than the sign-in
asked for, another audience or issuer, or signed by a key it does not publish.
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask
import uvicorn
from a2wsgi import WSGIMiddleware
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import AuthorizationCodeMixin, UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import RSAKey

from tests.conftest import free_port
from tests.waiting import wait_for

CLIENT_ID = "mismatch-monitor"
CLIENT_SECRET = "test-client-secret-7f3a"
SCOPES = ("openid", "email", "profile", "groups")


@dataclass(frozen=True)
class Account:
    username: str
    password: str
    sub: str
    email: str
    groups: tuple[str, ...] = ()
    email_verified: bool = True
    preferred_username: str | None = None  # what the person chose to be called; the username


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    redirect_uris: list[str]

    def get_client_id(self) -> str:
        return CLIENT_ID

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in scope.split() if s in SCOPES)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, CLIENT_SECRET)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic" if endpoint == "token" else True

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    redirect_uri: str
    scope: str
    account: Account
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time


class Provider:
    """The provider's state: accounts, issued codes, its signing key, and the switches."""

    def __init__(self, accounts: list[Account]) -> None:
        self.accounts = {a.username: a for a in accounts}
        self.codes: dict[str, Code] = {}
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key-1", "use": "sig"})
        self.client = Client(redirect_uris=[])
        self.forged: dict[str, Any] = {}  # claims put over the true ones in its ID tokens
        self.signing_key: RSAKey | None = None  # signs its ID tokens instead of `key`
        self.issuer = ""

    @contextmanager
    def forging(self, *, signed_by: RSAKey | None = None, **claims: Any) -> Iterator[None]:
        """ID tokens issued inside carry `claims` over the true ones (another `nonce`, `aud` or
        `iss`) and, with `signed_by`, are signed by that key under the published key's id:
        each a token a client must refuse."""
        self.forged, self.signing_key = dict(claims), signed_by
        try:
            yield
        finally:
            self.forged, self.signing_key = {}, None

    def app(self) -> flask.Flask:
        app = flask.Flask("test-oidc-provider")
        server = AuthorizationServer(app, query_client=self._client, save_token=lambda t, r: None)
        server.register_grant(
            _code_grant(self), [_openid(self)(require_nonce=True), CodeChallenge(required=True)]
        )

        @app.get("/.well-known/openid-configuration")
        def metadata() -> Any:
            return {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            }

        @app.get("/jwks")
        def jwks() -> Any:
            return {"keys": [self.key.as_dict(private=False)]}

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            if flask.request.method == "GET":
                return _login_form(flask.request.query_string.decode())
            form = flask.request.form
            account = self.accounts.get(form.get("username", ""))
            if account is None or not secrets.compare_digest(
                account.password, form.get("password", "")
            ):
                return _login_form(flask.request.query_string.decode(), "Wrong password"), 401
            grant = server.get_consent_grant(end_user=account)
            return server.create_authorization_response(grant=grant, grant_user=account)

        @app.post("/token")
        def token() -> Any:
            return server.create_token_response()

        return app

    def _client(self, client_id: str) -> Client | None:
        return self.client if client_id == CLIENT_ID else None


def _code_grant(provider: Provider) -> type[grants.AuthorizationCodeGrant]:
    class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
        TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]  # noqa: RUF012

        def save_authorization_code(self, code: str, request: Any) -> None:
            payload = request.payload
            provider.codes[code] = Code(
                code=code,
                redirect_uri=payload.redirect_uri,
                scope=payload.scope,
                account=request.user,
                nonce=payload.data.get("nonce"),
                code_challenge=payload.data.get("code_challenge"),
                code_challenge_method=payload.data.get("code_challenge_method"),
            )

        def query_authorization_code(self, code: str, client: Any) -> Code | None:
            return provider.codes.get(code)

        def delete_authorization_code(self, authorization_code: Code) -> None:
            provider.codes.pop(authorization_code.code, None)

        def authenticate_user(self, authorization_code: Code) -> Account:
            return authorization_code.account

    return CodeGrant


def _openid(provider: Provider) -> type[OpenIDCode]:
    class OpenID(OpenIDCode):  # type: ignore[misc]
        def exists_nonce(self, nonce: str, request: Any) -> bool:
            return any(c.nonce == nonce for c in provider.codes.values())

        def resolve_client_private_key(self, client: Any) -> Any:
            return provider.signing_key or provider.key

        def get_client_algorithm(self, client: Any) -> str:
            return "RS256"

        def get_encode_header(self, client: Any) -> dict[str, str]:
            return {"alg": "RS256", "kid": "test-key-1"}

        def get_client_claims(self, client: Any) -> dict[str, Any]:
            return {"iss": provider.issuer, "aud": [CLIENT_ID], "exp": int(time.time()) + 300}

        def get_authorization_code_claims(self, authorization_code: Any) -> dict[str, Any]:
            claims: dict[str, Any] = super().get_authorization_code_claims(authorization_code)
            return {**claims, **provider.forged}  # over the client claims (iss, aud) too

        def generate_user_info(self, user: Account, scope: str) -> UserInfo:
            return UserInfo(
                sub=user.sub,
                email=user.email,
                email_verified=user.email_verified,
                preferred_username=user.preferred_username or user.username,
                groups=list(user.groups),
            )

    return OpenID


def _login_form(query: str, message: str = "") -> str:
    note = f'<p id="error">{html.escape(message)}</p>' if message else ""
    action = html.escape(f"/authorize?{query}", quote=True)
    return f"""<!doctype html><title>Test identity provider</title>
<h1>Test identity provider</h1>{note}
<form method="post" action="{action}">
<input name="username" id="username" placeholder="username">
<input name="password" id="password" type="password" placeholder="password">
<button type="submit" id="provider-submit">Sign in</button></form>"""


@contextmanager
def serving(provider: Provider) -> Iterator[str]:
    """Serve `provider` on a free loopback port in a thread; yields its issuer URL."""
    port = free_port()
    provider.issuer = f"http://127.0.0.1:{port}"
    config = uvicorn.Config(
        WSGIMiddleware(provider.app()),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="oidc-provider", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, message="the test OIDC provider did not start")
        yield provider.issuer
    finally:
        server.should_exit = True
        thread.join(timeout=10)
