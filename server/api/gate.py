"""The gate in front of every non-API path: pages, Dash callbacks and assets need a session.

The API authenticates each request by its bearer token; a browser cannot send one, so a user
signs in once with a read or admin token and gets a session cookie (`server.services.sessions`).
`DashboardGate` turns the cookie back into the token's principal and hands the dashboard the
projects it may see in the `READER_HEADER` request header, stripped from what the client sent.
The dashboard's reads go through the same query service as the API's, filtered by those
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
from server.api.middleware import ASGIApp, Receive, Scope, Send, header
from server.domain.scopes import READER_HEADER
from server.errors import Unauthorized
from server.services.sessions import COOKIE, Sessions, cookie_value

OPEN_PATHS = frozenset(
    {"/login", "/logout", "/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc"}
    | {"/openapi.json"}
)
"""Paths that answer without a session: sign-in itself, liveness, the API's own documentation
(no data in it) and /metrics (which checks a token itself)."""


RELOAD_PAGE = (
    '<!doctype html><meta http-equiv="refresh" content="0"><title>Mismatch Monitor</title>'
)
"""What a navigation from another site gets: a same-site reload, which carries the cookie."""


class DashboardGate:
    """Lets a request for a page, callback or asset through only with a session (see module)."""

    def __init__(self, app: ASGIApp, *, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reader = READER_HEADER.encode()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != reader]
        scope = {**scope, "headers": headers}
        path = scope["path"]
        if path.startswith("/api/") or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        cookie = cookie_value(header(scope, b"cookie"), COOKIE)
        principal = await anyio.to_thread.run_sync(self.sessions.principal, cookie)
        if principal is None:
            await _refuse(scope, receive, send)
            return
        signed_in = principal.token_id is not None  # the open principal has no session
        granted = json.dumps(
            {"projects": principal.readable_projects(), "signed_in": signed_in}
        ).encode()
        scope["headers"] = [*headers, (reader, granted)]
        await self.app(scope, receive, send)


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


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: a path of this server only (never `//host` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_page(*, next_path: str, message: str = "") -> str:
    """The sign-in form: plain HTML, no script, every user-given value escaped."""
    note = f'<p style="color:#b00">{html.escape(message)}</p>' if message else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sign in · Mismatch Monitor</title></head>
<body style="font-family:sans-serif;max-width:420px;margin:80px auto">
<h2>Mismatch Monitor</h2>
<p>Sign in with a read or admin token (<code>mismatch token create --scope read …</code>).</p>
{note}
<form method="post" action="/login">
<input type="hidden" name="next" value="{html.escape(next_path, quote=True)}">
<input type="password" name="token" placeholder="mm_…" autocomplete="off" required
 style="width:100%;padding:6px" autofocus>
<p><button type="submit">Sign in</button></p>
</form></body></html>"""
