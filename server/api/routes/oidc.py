"""Sign-in through the identity provider (HTML, outside the JSON API): /login/oidc sends the
browser to the provider, /login/oidc/callback takes it back (`server.identity.signin`)."""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.api.deps import ServicesDep
from server.api.gate import login_page
from server.api.redirects import after_sign_in
from server.errors import MonitorError
from server.identity.signin import STATE_COOKIE, Redirect, SignIn

router = APIRouter(include_in_schema=False)

Param = Annotated[str | None, Query(max_length=4096)]


@router.get("/login/oidc")
def start_sign_in(services: ServicesDep, next: str = "/") -> Response:
    """Off to the identity provider, remembering where the person was going."""
    target = after_sign_in(next)
    signin = services.people.signin
    if signin is None:
        return RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
    try:
        return _redirect(signin.begin(target))
    except MonitorError as exc:
        return _page(target, f"The identity provider cannot be reached: {exc.message}", 503)


@router.get("/login/oidc/callback")
def finish_sign_in(
    request: Request,
    services: ServicesDep,
    code: Param = None,
    state: Param = None,
    error: Param = None,
    error_description: Param = None,
) -> Response:
    """Back from the provider: a session, then the page the person asked for."""
    signin = services.people.signin
    if signin is None:
        return _page("/", "This server signs in with tokens only.", 404)
    if error or not code or not state:
        said = error_description or error or "no code"
        return _page("/", f"The identity provider did not sign you in ({said}).", 401, signin)
    try:
        redirect = signin.finish(code=code, state=state, bound=request.cookies.get(STATE_COOKIE))
    except MonitorError as exc:
        return _page("/", exc.message, exc.status_code, signin)
    # Not a 303: this response ends a navigation that came from the provider's site, and a
    # browser would carry that into the next hop, which then goes without the SameSite=Strict
    # cookie just set. A page of ours that moves on starts a same-site navigation instead.
    target = html.escape(after_sign_in(redirect.location), quote=True)
    page = f'<!doctype html><meta http-equiv="refresh" content="0;url={target}"><title>…</title>'
    response = HTMLResponse(page, headers=_no_store())
    for cookie in redirect.cookies:
        response.headers.append("set-cookie", cookie)
    return response


def _redirect(redirect: Redirect) -> Response:
    response = RedirectResponse(redirect.location, status_code=303, headers=_no_store())
    for cookie in redirect.cookies:
        response.headers.append("set-cookie", cookie)
    return response


def _page(target: str, message: str, status: int, signin: SignIn | None = None) -> Response:
    """The sign-in page with what went wrong (the state cookie cleared when there was one)."""
    page = login_page(next_path=target, message=message, sso=signin is not None)
    response = HTMLResponse(page, status_code=status, headers=_no_store())
    if signin is not None:
        response.headers.append("set-cookie", signin.cleared())
    return response


def _no_store() -> dict[str, str]:
    return {"cache-control": "no-store"}
