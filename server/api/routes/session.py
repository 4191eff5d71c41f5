"""Sign-in and sign-out pages of the dashboard (HTML, outside the JSON API)."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.api.deps import ServicesDep
from server.api.gate import login_page
from server.api.redirects import after_sign_in
from server.errors import MonitorError
from server.services.sessions import COOKIE

router = APIRouter(include_in_schema=False)
MAX_FORM_BYTES = 4096


@router.get("/login")
def show_login(request: Request, services: ServicesDep, next: str = "/") -> Response:
    """The sign-in page; where nobody needs to sign in (no tokens, or the auth proxy names
    the person already), straight on to where they were going."""
    if not services.tokens.auth_enabled() or _named_by_proxy(request, services):
        return RedirectResponse(after_sign_in(next), status_code=303, headers=_no_store())
    sso = services.people.signin is not None
    return HTMLResponse(login_page(next_path=after_sign_in(next), sso=sso), headers=_no_store())


@router.post("/login")
async def sign_in(request: Request, services: ServicesDep) -> Response:
    """Trade a read or admin token for a session cookie, then go where the user was going."""
    body = await request.body()
    form = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", "replace"))
    target = after_sign_in(form.get("next", ["/"])[0])
    token = form.get("token", [""])[0].strip()
    try:
        principal = await run_in_threadpool(services.tokens.authenticate, f"Bearer {token}")
    except MonitorError:
        page = login_page(
            next_path=target,
            message="That token is not valid (or was revoked).",
            sso=services.people.signin is not None,
        )
        return HTMLResponse(page, status_code=401, headers=_no_store())
    if not principal.can_read:
        page = login_page(
            next_path=target,
            message="An ingest token cannot sign in: use a read or admin token of the project.",
            sso=services.people.signin is not None,
        )
        return HTMLResponse(page, status_code=403, headers=_no_store())
    response = RedirectResponse(target, status_code=303, headers=_no_store())
    if principal.token_id is not None:
        cookie = await run_in_threadpool(services.sessions.cookie, principal)
        response.headers.append("set-cookie", cookie)
    return response


@router.post("/logout")
def sign_out(request: Request, services: ServicesDep) -> Response:
    """End the session on the server (a copy of its cookie is refused from now on) and clear
    the cookie. A POST only: another site cannot make a browser send one here (the
    cross-origin check refuses it, and the cookie is SameSite=Strict)."""
    services.people.identity.end(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303, headers=_no_store())
    response.headers.append("set-cookie", services.sessions.cleared())
    return response


@router.api_route("/logout", methods=["GET", "HEAD", "PUT", "PATCH", "DELETE"])
def sign_out_needs_post() -> Response:
    """405: signing out changes state, so a link, an image or a prefetch cannot do it. A
    person who typed the address gets the button that does."""
    return HTMLResponse(SIGN_OUT_PAGE, status_code=405, headers={"allow": "POST", **_no_store()})


SIGN_OUT_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Sign out · Mismatch Monitor</title></head>
<body style="font-family:sans-serif;max-width:420px;margin:80px auto">
<h2>Mismatch Monitor</h2>
<p>Signing out takes a POST request:</p>
<form method="post" action="/logout"><button type="submit">Sign out</button></form>
</body></html>"""


def _named_by_proxy(request: Request, services: ServicesDep) -> bool:
    """Whether the auth proxy names a person on this request (refused, 403, when the header
    comes from elsewhere than the proxy)."""
    identity = services.people.identity
    if identity.proxy is None or identity.proxy.header not in request.headers:
        return False
    return identity.resolve_scope(request.scope).principal.person is not None


def _no_store() -> dict[str, str]:
    return {"cache-control": "no-store"}
