"""OpenID Connect sign-in: the authorization code flow with PKCE (S256), a state bound to the
browser and used once, and a nonce checked in the ID token.

Authlib builds the protocol's requests (the authorization URL, the PKCE challenge, the client's
authentication at the token endpoint); joserfc (Authlib's JOSE library) checks the ID token's
signature against the provider's published keys and its claims: issuer, audience, expiry,
nonce. The server's own httpx client talks to the provider.

A person is the issuer and subject of their ID token; their e-mail address counts only when
the provider verified it; their groups come from `--oidc-groups-claim` (the ID token's, else the
userinfo endpoint's). Their `preferred_username` is shown, never matched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.oauth2.auth import ClientAuth
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from server.domain.identity import MAX_ISSUER, MAX_SUBJECT, Person
from server.errors import Unauthorized, Unavailable
from server.storage.identity.people import PendingLogin

SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
"""Asymmetric only: never "none", and never a MAC keyed with the client secret."""
METADATA_TTL_S = 3600.0
LEEWAY_S = 60
MAX_GROUPS = 200
MAX_SHOWN = 320
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Started:
    url: str  # the provider's authorization URL to send the browser to
    state: str
    login: PendingLogin


class OidcClient:
    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None,
        scopes: str,
        redirect_uri: str,
        groups_claim: str | None = None,
        http: Callable[[], httpx.Client] = lambda: httpx.Client(timeout=10.0),
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self.client_secret = client_secret
        self.scopes = scopes
        self.redirect_uri = redirect_uri
        self.groups_claim = groups_claim
        self._http = http
        self._lock = threading.Lock()
        self._metadata: tuple[float, dict[str, Any]] | None = None
        self._keys: KeySet | None = None

    def begin(self, next_path: str) -> Started:
        """A new sign-in: its state, nonce and PKCE verifier, and where to send the browser."""
        endpoint = self._endpoint("authorization_endpoint")
        state, nonce, verifier = generate_token(43), generate_token(43), generate_token(64)
        url = prepare_grant_uri(
            endpoint,
            client_id=self.client_id,
            response_type="code",
            redirect_uri=self.redirect_uri,
            scope=self.scopes,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        return Started(url, state, PendingLogin(nonce, verifier, next_path))

    def finish(self, code: str, login: PendingLogin) -> Person:
        """Trade the code for tokens (with the PKCE verifier) and check the ID token."""
        tokens = self._token_request(code, login.verifier)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise Unauthorized("the identity provider sent no ID token")
        claims = self._checked_claims(id_token, login.nonce)
        access = tokens.get("access_token")
        if isinstance(access, str) and self._wants_userinfo(claims):
            claims = {**self._userinfo(access, claims["sub"]), **claims}
        return person_of(claims, self.groups_claim)

    def _token_request(self, code: str, verifier: str) -> dict[str, Any]:
        endpoint = self._endpoint("token_endpoint")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": verifier,
        }
        methods = self._metadata_now().get("token_endpoint_auth_methods_supported") or []
        method = "none"
        if self.client_secret:
            basic = not methods or "client_secret_basic" in methods
            method = "client_secret_basic" if basic else "client_secret_post"
        body = str(httpx.QueryParams(form))
        headers = {"Content-Type": FORM, "Accept": "application/json"}
        auth = ClientAuth(self.client_id, self.client_secret or "", method)
        _, headers, body = auth.prepare("POST", endpoint, headers, body)
        try:
            with self._http() as client:
                response = client.post(endpoint, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the identity provider: {exc}") from exc
        if response.status_code != 200:
            raise Unauthorized(
                f"the identity provider refused the sign-in code ({response.status_code}): "
                f"{response.text[:200]}"
            )
        found: Any = response.json()
        return found if isinstance(found, dict) else {}

    def _checked_claims(self, id_token: str, nonce: str) -> dict[str, Any]:
        try:
            token = jwt.decode(id_token, self._key_set(id_token), algorithms=SIGNING_ALGORITHMS)
            jwt.JWTClaimsRegistry(
                leeway=LEEWAY_S,
                iss={"essential": True, "value": self._metadata_now()["issuer"]},
                aud={"essential": True, "value": self.client_id},
                sub={"essential": True},
                exp={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(token.claims)
        except (JoseError, ValueError) as exc:
            raise Unauthorized(f"the ID token was refused: {exc}") from exc
        claims = dict(token.claims)
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.client_id:
            raise Unauthorized("the ID token was issued to another client (azp)")
        return claims

    def _wants_userinfo(self, claims: dict[str, Any]) -> bool:
        missing_groups = self.groups_claim is not None and self.groups_claim not in claims
        return ("email" not in claims or missing_groups) and bool(
            self._metadata_now().get("userinfo_endpoint")
        )

    def _userinfo(self, access_token: str, subject: str) -> dict[str, Any]:
        """The userinfo endpoint's claims about the same subject (else none)."""
        try:
            with self._http() as client:
                response = client.get(
                    self._endpoint("userinfo_endpoint"),
                    headers={"Authorization": f"Bearer {access_token}"},
                )
            found: Any = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return {}
        if not isinstance(found, dict) or found.get("sub") != subject:
            return {}
        return found

    def _key_set(self, id_token: str) -> KeySet:
        """The provider's keys; fetched again once when the token names a key not among them
        (the provider rotated its keys)."""
        keys = self._keys
        kid = _header_kid(id_token)
        if keys is None or (kid is not None and kid not in {k.kid for k in keys.keys}):
            with self._http() as client:
                response = client.get(self._endpoint("jwks_uri"))
            keys = KeySet.import_key_set(response.json())
            self._keys = keys
        return keys

    def _endpoint(self, name: str) -> str:
        value = self._metadata_now().get(name)
        if not isinstance(value, str):
            raise Unavailable(f"the identity provider's metadata has no {name}")
        return value

    def _metadata_now(self) -> dict[str, Any]:
        """The provider's discovery document (cached for an hour)."""
        with self._lock:
            cached = self._metadata
            if cached is not None and time.monotonic() - cached[0] < METADATA_TTL_S:
                return cached[1]
        url = f"{self.issuer}/.well-known/openid-configuration"
        try:
            with self._http() as client:
                response = client.get(url)
            document: Any = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise Unavailable(f"cannot read the identity provider's metadata at {url}") from exc
        if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != self.issuer:
            raise Unavailable(f"{url} names another issuer than --oidc-issuer {self.issuer}")
        with self._lock:
            self._metadata = (time.monotonic(), document)
        return document


def person_of(claims: dict[str, Any], groups_claim: str | None) -> Person:
    """The person an ID token names: their issuer and subject; their e-mail address only when
    the provider verified it; their groups from `groups_claim`. The shown name (the verified
    e-mail, else `preferred_username`, else the subject) is for display only."""
    issuer, subject = str(claims["iss"]).rstrip("/"), str(claims["sub"])
    if len(issuer) > MAX_ISSUER or len(subject) > MAX_SUBJECT:
        raise Unauthorized(
            f"the ID token's issuer or subject is longer than {MAX_SUBJECT} characters"
        )
    email = claims.get("email")
    verified = (
        str(email) if isinstance(email, str) and claims.get("email_verified") is True else None
    )
    raw = claims.get(groups_claim) if groups_claim else None
    if isinstance(raw, str):
        raw = [raw]
    groups = tuple(str(g) for g in raw[:MAX_GROUPS]) if isinstance(raw, list) else ()
    shown = verified or str(claims.get("preferred_username") or subject)
    return Person(issuer, subject, verified, groups, shown[:MAX_SHOWN])


def _header_kid(token: str) -> str | None:
    try:
        kid = jws.extract_compact(token.encode()).headers().get("kid")
    except (JoseError, ValueError):
        return None
    return kid if isinstance(kid, str) else None
