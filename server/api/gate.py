"""The gate in front of every non-API path: pages, Dash callbacks and assets need a session.

The API authenticates each request by its bearer token; a browser cannot send one, so a user
signs in once, with a read or admin token or through the identity provider, and gets a session
cookie (`server.services.sessions`, `server.identity.sessions`); behind an auth proxy, the
proxy's header names them. `DashboardGate` turns these into the caller's principal through the
same resolver as the API (`server.identity.resolver`) and hands the dashboard the projects it
may see in the `READER_HEADER` request header, stripped from what the client sent.
The dashboard's reads go through the same read service as the API's, filtered by those
projects: one code path for both.

A SameSite=Strict cookie is not sent when a user follows a link from another site (an alert in
Slack). Such a navigation gets a page that reloads itself; the reload is same-site, carries the
cookie, and lands on the view, or on the sign-in page with the view as its `next`.
"""

from __future__ import annotations

import html
import json
from urllib.parse import quote

import anyio
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.api import errors
from server.api.middleware import ASGIApp, Message, Receive, Scope, Send, header
from server.domain.scopes import READER_HEADER
from server.errors import Forbidden, MonitorError, Unauthorized
from server.identity.resolver import Identity

OPEN_PATHS = frozenset(
    {"/login", "/logout", "/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc"}
    | {"/openapi.json", "/login/oidc", "/login/oidc/callback", "/login/link"}
)
"""Paths that answer without a session: sign-in itself, liveness, the API's own documentation
(no data in it; its assets under /docs/assets/ too) and /metrics (which checks a token itself)."""


RELOAD_PAGE = (
    '<!doctype html><meta http-equiv="refresh" content="0"><title>Mismatch Monitor</title>'
)
"""What a navigation from another site gets: a same-site reload, which carries the cookie."""


class DashboardGate:
    """Lets a request for a page, callback or asset through only with a session (see module)."""

    def __init__(self, app: ASGIApp, *, identity: Identity) -> None:
        self.app = app
        self.identity = identity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reader = READER_HEADER.encode()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != reader]
        scope = {**scope, "headers": headers}
        path = scope["path"]
        if path.startswith(("/api/", "/docs/assets/")) or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            resolved = await anyio.to_thread.run_sync(self.identity.resolve_scope, scope)
        except Unauthorized:
            await _refuse(scope, receive, send)
            return
        except Forbidden as exc:
            await _forbid(exc, scope, receive, send)
            return
        except MonitorError as exc:  # a header that names the caller twice, or not in UTF-8
            await errors.response(exc)(scope, receive, send)
            return
        principal = resolved.principal
        granted = json.dumps(
            {
                "projects": principal.readable_projects(),
                "signed_in": resolved.session,
                "who": principal.user,
                "token": principal.token_id,
                "roles": principal.roles(),
            }
        ).encode()
        scope["headers"] = [*headers, (reader, granted)]
        await self.app(scope, receive, with_cookie(send, resolved.refreshed))


def with_cookie(send: Send, cookie: str | None) -> Send:
    """`send`, adding a Set-Cookie to the response's headers when there is one to send (a
    session pushed on while in use)."""
    if cookie is None:
        return send

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            message = {**message, "headers": [*headers, (b"set-cookie", cookie.encode())]}
        await send(message)

    return sending


async def _forbid(exc: MonitorError, scope: Scope, receive: Receive, send: Send) -> None:
    """403: a page saying why (and how to sign out) for a navigation, the JSON error else."""
    response: Response
    if scope["method"] == "GET" and "text/html" in (header(scope, b"accept") or ""):
        response = HTMLResponse(refused_page(exc.message), status_code=403)
    else:
        response = errors.response(exc)
    response.headers["cache-control"] = "no-store"
    await response(scope, receive, send)


def refused_page(message: str) -> str:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>No access · Mismatch Monitor</title></head>
<body style="font-family:sans-serif;max-width:520px;margin:80px auto">
<h2>Mismatch Monitor</h2><p>{html.escape(message)}</p>
<form method="post" action="/logout"><button type="submit">Sign out</button></form>
</body></html>"""


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    """A page navigation goes to sign-in (through a same-site reload when it came from another
    site); anything else, a callback or an asset, gets a 401 without data."""
    navigation = scope["method"] == "GET" and (
        header(scope, b"sec-fetch-mode") == "navigate"
        or "text/html" in (header(scope, b"accept") or "")
    )
    response: Response
    if not navigation:
        response = errors.response(Unauthorized("sign in first: open /login in the browser"))
    elif header(scope, b"sec-fetch-site") == "cross-site":
        response = HTMLResponse(RELOAD_PAGE)
    else:
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope["path"] + (f"?{query}" if query else "")
        response = RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
    response.headers["cache-control"] = "no-store"
    await response(scope, receive, send)


def login_page(*, next_path: str, message: str = "", sso: bool = False) -> str:
    """The sign-in form: plain HTML, no script, every user-given value escaped; with `sso`, a
    link to sign in through the identity provider first."""
    note = f'<p style="color:#b00">{html.escape(message)}</p>' if message else ""
    if sso:
        start = "/login/oidc?next=" + quote(next_path, safe="")
        note += (
            f'<p><a id="sso" href="{html.escape(start, quote=True)}" style="font-size:1.2em">'
            "Sign in with your organisation's account</a></p><p>or with a token:</p>"
        )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sign in · Mismatch Monitor</title></head>
<body style="font-family:sans-serif;max-width:420px;margin:80px auto">
<h2>Mismatch Monitor</h2>
<p>Sign in with a read or admin token (<code>mismatch token create --scope read …</code>).</p>
<p id="local-signin">At the machine that runs the server, <code>mismatch signin</code> prints a
one-time sign-in link.</p>
{note}
<form method="post" action="/login">
<input type="hidden" name="next" value="{html.escape(next_path, quote=True)}">
<input type="password" name="token" placeholder="mm_…" autocomplete="off" required
 style="width:100%;padding:6px" autofocus>
<p><button type="submit">Sign in</button></p>
</form></body></html>"""
