"""The dashboard of a shared deployment: nothing without a session, every callback filtered by
the signed-in reader's projects, and sign-in that keeps the view a deep link asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from dashboard import ids
from tests import web
from tests.dashboard.chromium import launched
from tests.security.conftest import ALPHA_RUN, BETA_RUN, SECRET, Deployment

pytestmark = [pytest.mark.security, pytest.mark.browser]

HTML = {"Accept": "text/html"}


@contextmanager
def signed_in(deployment: Deployment, kind: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.server.url, timeout=60) as client:
        response = client.post(
            "/login", data={"token": deployment.tokens[kind], "next": "/"}, follow_redirects=False
        )
        assert response.status_code == 303, response.text
        yield client


def test_no_page_callback_or_asset_without_a_session(deployment: Deployment) -> None:
    url = deployment.server.url
    page = web.get(f"{url}/run?run={ALPHA_RUN}", headers=HTML, timeout=30)
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=" + quote(f"/run?run={ALPHA_RUN}", safe="")
    for path in ("/_dash-layout", "/_dash-dependencies", "/assets/style.css", "/favicon.ico"):
        assert web.get(url + path, timeout=30).status_code == 401, path
    forged = {"x-mismatch-reader": json.dumps({"projects": None})}
    callback = web.post(f"{url}/_dash-update-component", json={}, headers=forged, timeout=30)
    assert callback.status_code == 401 and ALPHA_RUN not in callback.text
    assert SECRET not in page.text + callback.text


def test_the_session_cookie_is_signed_http_only_and_strict(deployment: Deployment) -> None:
    with signed_in(deployment, "read_alpha") as client:
        cookie = client.post(
            "/login", data={"token": deployment.tokens["read_alpha"]}, follow_redirects=False
        ).headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=43200" in cookie
        value = client.cookies["mm_session"]
        assert client.get("/_dash-layout").status_code == 200
    tampered = value[:-2] + ("AA" if not value.endswith("AA") else "BB")
    refused = web.get(
        deployment.server.url + "/_dash-layout", cookies={"mm_session": tampered}, timeout=30
    )
    assert refused.status_code == 401


def test_ingest_and_unknown_tokens_cannot_sign_in(deployment: Deployment) -> None:
    url = deployment.server.url
    ingest = web.post(f"{url}/login", data={"token": deployment.tokens["ingest_alpha"]})
    assert ingest.status_code == 403 and "mm_session" not in ingest.headers.get("set-cookie", "")
    bogus = web.post(f"{url}/login", data={"token": "mm_nope_nope"})
    assert bogus.status_code == 401


def test_sign_in_goes_only_to_this_server(deployment: Deployment) -> None:
    for target in ("https://evil.example/x", "//evil.example/x", "/\\evil.example"):
        response = web.post(
            deployment.server.url + "/login",
            data={"token": deployment.tokens["read_alpha"], "next": target},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/", target


def _callbacks(client: httpx.Client) -> list[dict[str, Any]]:
    found = client.get("/_dash-dependencies")
    assert found.status_code == 200
    return list(found.json())


def _body(callback: dict[str, Any], values: dict[str, Any]) -> dict[str, Any] | None:
    """A callback request as the browser would send it, inputs set from `values` by
    "id.property" (else None); None for pattern-matching callbacks."""
    if "{" in callback["output"]:
        return None
    output = callback["output"]
    parts = output[2:-2].split("...") if output.startswith("..") else [output]
    outputs = [dict(zip(("id", "property"), p.rsplit(".", 1), strict=True)) for p in parts]

    def fill(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in items]

    inputs = fill(callback["inputs"])
    return {
        "output": output,
        "outputs": outputs if output.startswith("..") else outputs[0],
        "inputs": inputs,
        "state": fill(callback.get("state", [])),
        "changedPropIds": [f"{i['id']}.{i['property']}" for i in inputs[:1]],
    }


def test_every_callback_answers_only_with_the_readers_projects(deployment: Deployment) -> None:
    """Each callback of the map, asked about alpha's run by a beta reader, shows nothing of
    alpha; the same route callback asked by an alpha reader shows the run (so the requests are
    real ones)."""
    values = {
        f"{ids.URL}.pathname": "/run",
        f"{ids.URL}.search": f"?run={ALPHA_RUN}",
        f"{ids.RUN_VIEW}.data": {"run": ALPHA_RUN},
        f"{ids.RUN_ZOOM}.data": {},
        f"{ids.RUN_METRICS}.value": [],
    }
    with signed_in(deployment, "read_beta") as beta, signed_in(deployment, "read_alpha") as alpha:
        callbacks = _callbacks(beta)
        assert len(callbacks) >= 10
        asked = 0
        for callback in callbacks:
            body = _body(callback, values)
            if body is None:
                continue
            asked += 1
            answer = beta.post("/_dash-update-component", json=body)
            assert answer.status_code != 401
            assert SECRET not in answer.text, callback["output"]
            assert "project alpha" not in answer.text, callback["output"]
        assert asked >= 10
        route = next(c for c in callbacks if c["output"] == f"{ids.PAGE}.children")
        body = _body(route, values)
        assert body is not None
        assert "Run not found" in beta.post("/_dash-update-component", json=body).text
        seen_by_alpha = alpha.post("/_dash-update-component", json=body)
        assert seen_by_alpha.status_code == 200 and "project alpha" in seen_by_alpha.text


def test_a_revoked_token_ends_its_sessions(deployment: Deployment) -> None:
    server = deployment.server
    created = server.post(
        "/api/v1/tokens",
        {"project": "beta", "scope": "read"},
        token=deployment.tokens["admin_beta"],
    ).json()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/login", data={"token": created["token"]}, follow_redirects=False)
        assert client.get("/_dash-layout").status_code == 200
        revoked = web.delete(
            f"{server.url}/api/v1/tokens/{created['id']}", headers=deployment.headers("admin_beta")
        )
        assert revoked.status_code == 200
        assert client.get("/_dash-layout").status_code == 401


def test_a_link_from_another_site_reloads_itself_to_carry_the_session(
    deployment: Deployment,
) -> None:
    headers = {**HTML, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    page = web.get(f"{deployment.server.url}/run?run={ALPHA_RUN}", headers=headers, timeout=30)
    assert page.status_code == 200 and 'http-equiv="refresh"' in page.text
    assert ALPHA_RUN not in page.text


def test_a_deep_link_goes_through_sign_in_and_lands_on_the_view(deployment: Deployment) -> None:
    """In Chromium: an alert's link while signed out, sign in as alpha, the run is drawn; as a
    beta reader the same link finds no run and the runs page lists beta's runs only."""
    url = deployment.server.url
    link = f"{url}/run?run={ALPHA_RUN}&step_min=10&step_max=30"
    with launched() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(link)
        page.wait_for_selector("input[name=token]")
        assert "/login" in page.url and SECRET not in page.content()
        page.fill("input[name=token]", deployment.tokens["read_alpha"])
        page.click("button[type=submit]")
        page.wait_for_selector(f"#{ids.RUN_TITLE}")
        assert page.url.startswith(f"{url}/run?run={ALPHA_RUN}")
        assert "step_min=10&step_max=30" in page.url
        assert "project alpha" in page.inner_text(f"#{ids.RUN_SUBTITLE}")
        cookies = {c["name"]: c for c in context.cookies()}
        assert cookies["mm_session"]["httpOnly"] and cookies["mm_session"]["sameSite"] == "Strict"
        page.click("text=Sign out")
        page.wait_for_selector("input[name=token]")
        context.close()

        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(url + "/")
        page.fill("input[name=token]", deployment.tokens["read_beta"])
        page.click("button[type=submit]")
        page.wait_for_selector(f"#{ids.RUNS_TABLE} td")
        table = page.inner_text(f"#{ids.RUNS_TABLE}")
        assert BETA_RUN in table and ALPHA_RUN not in table
        page.goto(link)
        page.wait_for_selector("text=Run not found")
        assert SECRET not in page.content()
        context.close()
