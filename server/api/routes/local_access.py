"""The person at the server's machine: a one-time dashboard sign-in link and the local admin
credential, for whoever holds the key of the server's local file (`server.identity.local_access`).
Outside the OpenAPI document: they are for this machine's CLI and browser, not for clients."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.api.deps import ServicesDep
from server.api.gate import login_page
from server.api.redirects import after_sign_in
from server.errors import MonitorError
from server.identity.local_access import LINK_PATH

router = APIRouter(include_in_schema=False)

NO_STORE = {"cache-control": "no-store"}
KeyHeader = Annotated[str | None, Header(alias="x-mismatch-local-key")]


class SigninLinkOut(BaseModel):
    url: str
    expires_in_s: int


class CredentialOut(BaseModel):
    token: str | None  # None while the server needs no token


def _peer(request: Request) -> str | None:
    return request.client.host if request.client else None


@router.post("/api/v1/local/signin-link", response_model=SigninLinkOut)
def signin_link(request: Request, services: ServicesDep, key: KeyHeader = None) -> SigninLinkOut:
    """A one-time link that signs this machine's browser in to the dashboard."""
    services.local.check(key, _peer(request))
    made = services.local.link()
    return SigninLinkOut(url=made.url, expires_in_s=made.expires_in_s)


@router.post("/api/v1/local/credential", response_model=CredentialOut)
def credential(request: Request, services: ServicesDep, key: KeyHeader = None) -> CredentialOut:
    """The bearer token this machine's CLI acts with, as the server's administrator."""
    services.local.check(key, _peer(request))
    return CredentialOut(token=services.local.credential())


@router.get(LINK_PATH)
async def use_link(
    request: Request, services: ServicesDep, code: str = "", next: str = "/"
) -> Response:
    """Trade a one-time link for a dashboard session, then go where the link points."""
    target = after_sign_in(next)
    try:
        cookie = await run_in_threadpool(services.local.redeem, code, _peer(request))
    except MonitorError as exc:
        page = login_page(
            next_path=target, message=exc.message, sso=services.people.signin is not None
        )
        return HTMLResponse(page, status_code=exc.status_code, headers=NO_STORE)
    response = RedirectResponse(target, status_code=303, headers=NO_STORE)
    if cookie is not None:
        response.headers.append("set-cookie", cookie)
    return response
