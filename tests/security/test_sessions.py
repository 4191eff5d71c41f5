"""Dashboard sessions end on the server: signing out deletes the session, so a copy of its
cookie (taken from the browser, a proxy log, a shared machine) is refused from then on instead
of working for the rest of its 12 hours — on every replica that shares the database. Signing
out is a POST: a link, an image or a page of another site cannot do it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.conftest import ServerProcess, fresh_pg_database
from tests.security.conftest import Deployment

pytestmark = pytest.mark.security

PAGE = "/_dash-layout"  # a dashboard read that needs a session


def sign_in(url: str, token: str) -> str:
    """A new session's cookie value, as the sign-in form gets it."""
    response = web.post(
        f"{url}/login", data={"token": token, "next": "/"}, follow_redirects=False, timeout=30
    )
    assert response.status_code == 303, response.text
    return response.cookies["mm_session"]


def read(url: str, cookie: str) -> httpx.Response:
    return web.get(url + PAGE, cookies={"mm_session": cookie}, timeout=30)


def sign_out(url: str, cookie: str) -> httpx.Response:
    return web.post(
        f"{url}/logout",
        cookies={"mm_session": cookie},
        headers={"Origin": url},  # what a browser's form post sends
        follow_redirects=False,
        timeout=30,
    )


def test_a_copied_cookie_is_refused_after_sign_out(deployment: Deployment) -> None:
    url = deployment.server.url
    cookie = sign_in(url, deployment.tokens["read_alpha"])
    copy = str(cookie)
    assert read(url, copy).status_code == 200
    out = sign_out(url, cookie)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert "mm_session=;" in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
    refused = read(url, copy)
    assert refused.status_code == 401 and "sign in" in refused.json()["detail"]


def test_signing_out_ends_only_that_session(deployment: Deployment) -> None:
    url, token = deployment.server.url, deployment.tokens["read_beta"]
    laptop, desktop = sign_in(url, token), sign_in(url, token)
    assert sign_out(url, laptop).status_code == 303
    assert read(url, laptop).status_code == 401
    assert read(url, desktop).status_code == 200


def test_a_cookie_of_an_ended_session_cannot_be_replayed_into_a_new_one(
    deployment: Deployment,
) -> None:
    url = deployment.server.url
    old = sign_in(url, deployment.tokens["admin_beta"])
    sign_out(url, old)
    fresh = sign_in(url, deployment.tokens["admin_beta"])
    assert fresh != old
    assert read(url, old).status_code == 401 and read(url, fresh).status_code == 200


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
def test_logout_answers_post_only(deployment: Deployment, method: str) -> None:
    url = deployment.server.url
    cookie = sign_in(url, deployment.tokens["read_alpha"])
    answer = web.request(
        method,
        f"{url}/logout",
        cookies={"mm_session": cookie},
        headers={"Accept": "text/html", "Origin": url},
        timeout=30,
    )
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert "set-cookie" not in answer.headers
    if method == "GET":  # a person who typed the address gets the button, not the dashboard
        assert 'method="post" action="/logout"' in answer.text
        assert "_dash-config" not in answer.text and "dash-renderer" not in answer.text
    assert read(url, cookie).status_code == 200  # nothing was ended


def test_a_sign_out_from_another_site_is_refused(deployment: Deployment) -> None:
    url = deployment.server.url
    cookie = sign_in(url, deployment.tokens["read_alpha"])
    forged = web.post(
        f"{url}/logout",
        cookies={"mm_session": cookie},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
        timeout=30,
    )
    assert forged.status_code == 403
    assert read(url, cookie).status_code == 200


@pytest.mark.postgres
def test_sign_out_on_one_replica_ends_the_session_on_another(
    server_factory: Callable[..., ServerProcess], postgres_url: str, tmp_path: Path
) -> None:
    url = fresh_pg_database(postgres_url)
    db = Database(url)
    migrate.upgrade(db)
    _, token = TokenService(db).create(project="alpha", scope="read")
    db.dispose()
    first, second = server_factory(url), server_factory(url)
    cookie = sign_in(first.url, token)
    assert read(second.url, cookie).status_code == 200  # one session, both replicas
    assert sign_out(first.url, cookie).status_code == 303
    assert read(second.url, cookie).status_code == 401
    assert read(first.url, cookie).status_code == 401
