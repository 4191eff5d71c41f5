"""The way in for the person at the server's machine, however the first token came to exist.

A server that serves only loopback writes a key into a file only its owner can read
(`server.identity.local_file`). Presenting that key from a loopback address gets:

- a one-time sign-in link for the dashboard (as Jupyter prints one): it works once, within
  `LINK_TTL_S`, from a loopback address only, and starts an ordinary dashboard session
  (`server.services.sessions`), so signing out and the session's expiry work as for any other;
- the server's local admin credential, which the CLI sends as a bearer token, so the admin
  commands (`mismatch token create --url …`) work without a token of one's own.

Both act as a server-admin token that this server run makes for itself when it first needs one
while tokens are required (while none exists, everything is open and nothing is needed), and
revokes when it stops (and, after a crash, when it next starts): revoking it by hand ends its
sessions at once, like any token's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import ip_address
from urllib.parse import quote

from server.auth import Principal
from server.domain.scopes import ALL_PROJECTS
from server.errors import Forbidden, NotFound, Unauthorized
from server.identity import local_file
from server.services.sessions import Sessions
from server.services.tokens import TokenService

LINK_TTL_S = 600
LINK_PATH = "/login/link"
TOKEN_NAME = "local access of the running server"
MAX_OPEN_LINKS = 64


@dataclass(frozen=True)
class SigninLink:
    url: str
    expires_in_s: int


class LocalAccess:
    def __init__(
        self,
        tokens: TokenService,
        sessions: Sessions,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.sessions = sessions
        self.published: local_file.LocalServer | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._links: dict[str, float] = {}  # sha256 of a code → when it expires
        self._admin: tuple[str, str] | None = None  # (token id, whole token) of this run
        self._token_name = TOKEN_NAME

    # -- the file ---------------------------------------------------------------------------
    def publish(self, *, url: str, db: str, port: int) -> local_file.LocalServer | None:
        """Write the key file (None when another live server has its port's); revoke what an
        earlier run of a server left behind."""
        self.published = local_file.publish(url=url, db=db, port=port)
        if self.published is not None:
            # named by port: replicas of one shared database on this machine keep theirs
            self._token_name = f"{TOKEN_NAME} (port {port})"
            self._revoke_leftovers()
        return self.published

    def close(self) -> None:
        """Remove the key file and revoke this run's credential."""
        if self.published is not None:
            local_file.withdraw(self.published)
            self.published = None
        with self._lock:
            made, self._admin = self._admin, None
        if made is not None:
            # the database may be closing already: the next start revokes it then
            with contextlib.suppress(Exception):
                self.tokens.revoke(made[0])

    # -- what the key gets -------------------------------------------------------------------
    def check(self, key: str | None, peer: str | None) -> None:
        """Forbidden from beyond loopback, Unauthorized without the file's key."""
        if not _is_loopback(peer):
            raise Forbidden("local access answers only on the server's own machine (loopback)")
        if self.published is None:
            raise NotFound(
                "this server keeps no local access file (it serves beyond loopback, or was "
                "not started by `mismatch serve`): sign in with a read or admin token"
            )
        if not key or not hmac.compare_digest(key.encode(), self.published.key.encode()):
            raise Unauthorized(
                f"local access needs the key in {self.published.path}, readable by the user "
                "who started the server: run the command as that user"
            )

    def link(self, next_path: str = "/") -> SigninLink:
        """A new one-time sign-in link (the caller has passed `check`, or is `serve` itself)."""
        assert self.published is not None, "publish() first"
        code = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._links = {h: t for h, t in self._links.items() if t > now}
            if len(self._links) >= MAX_OPEN_LINKS:  # the oldest unused ones go first
                for stale in sorted(self._links, key=self._links.__getitem__)[:8]:
                    del self._links[stale]
            self._links[_digest(code)] = now + LINK_TTL_S
        target = f"{self.published.url}{LINK_PATH}?code={code}"
        if next_path != "/":
            target += "&next=" + quote(next_path, safe="")
        return SigninLink(target, LINK_TTL_S)

    def redeem(self, code: str, peer: str | None) -> str | None:
        """Use a link: the Set-Cookie value of a new session (None while the server needs no
        token: the dashboard is open). Unauthorized for a link unknown, used or expired;
        Forbidden from beyond loopback."""
        if not _is_loopback(peer):
            raise Forbidden("a sign-in link works only on the server's own machine (loopback)")
        with self._lock:
            expires = self._links.pop(_digest(code), None)
        if expires is None or expires <= self._clock():
            raise Unauthorized(
                "this sign-in link was used already or has expired: run `mismatch signin` "
                "on the server's machine for a new one"
            )
        if not self.tokens.auth_enabled():
            return None
        return self.sessions.cookie(self._principal())

    def credential(self) -> str | None:
        """The bearer token the CLI acts with (None while the server needs no token)."""
        if not self.tokens.auth_enabled():
            return None
        self._principal()
        assert self._admin is not None
        return self._admin[1]

    def _principal(self) -> Principal:
        """This run's server-admin token, made at first need (again if it was revoked)."""
        with self._lock:
            if self._admin is not None and self.tokens.principal_of(self._admin[0]) is None:
                self._admin = None
            if self._admin is None:
                info, whole = self.tokens.create(
                    project=None, scope="server-admin", name=self._token_name
                )
                self._admin = (info.id, whole)
            return Principal(self._admin[0], ALL_PROJECTS, "server-admin")

    def _revoke_leftovers(self) -> None:
        for info in self.tokens.list(project=ALL_PROJECTS):
            if info.name == self._token_name and info.scope == "server-admin":
                self.tokens.revoke(info.id)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _is_loopback(peer: str | None) -> bool:
    if not peer:
        return False
    try:
        return ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
