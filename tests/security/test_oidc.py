"""Sign-in through a real OpenID Connect provider (`oidc_provider`: Authlib's authorization
server on a loopback port): people get exactly their mapped projects in the API, the dashboard
and /metrics, lose them at their next request when a mapping goes, and a sign-in whose state
or nonce is not the one this browser started, or whose ID token names another audience or
issuer or fails its signature, is refused."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc.jwk import RSAKey

from dashboard import ids
from tests import web
from tests.dashboard.chromium import launched
from tests.security.conftest import (
    ALPHA_RUN,
    BETA_RUN,
    PASSWORD,
    SECRET,
    Deployment,
    oidc_sign_in,
    on_each_database,
    provider_login,
)
from tests.security.test_dashboard_signin import _body, _callbacks

pytestmark = [pytest.mark.security, on_each_database]


def test_a_person_reads_their_projects_only_in_the_api(deployment: Deployment) -> None:
    with oidc_sign_in(deployment.server.url, "alice") as alice:
        me = alice.get("/api/v1/me").json()
        assert deployment.provider is not None
        alice_id = f"{deployment.provider.issuer}#u-alice"
        assert me["user"] == "alice@lab.example" and me["actor"] == f"person:{alice_id}"
        assert (me["id"], me["email"]) == (alice_id, "alice@lab.example")
        assert me["projects"] == [{"project": "alpha", "role": "read"}]
        runs = alice.get("/api/v1/runs").json()["data"]
        assert {r["project"] for r in runs} == {"alpha"}
        assert alice.get(f"/api/v1/runs/{BETA_RUN}").status_code == 404
        assert alice.get(f"/api/v1/runs/{ALPHA_RUN}").status_code == 200
        refused = alice.post("/api/v1/silences", json={"project": "alpha", "until": 2e9})
        assert refused.status_code == 403  # a reader does not silence
    with oidc_sign_in(deployment.server.url, "dave") as dave:  # beta, by the mapping file
        text = dave.get("/api/v1/runs").text + dave.get("/metrics").text
        assert BETA_RUN in text and ALPHA_RUN not in text and SECRET not in text


def test_metrics_show_a_person_their_projects_runs_only(deployment: Deployment) -> None:
    with oidc_sign_in(deployment.server.url, "alice") as alice:
        scrape = alice.get("/metrics")
        assert scrape.status_code == 200
        assert ALPHA_RUN in scrape.text and BETA_RUN not in scrape.text


def test_every_callback_shows_a_person_their_projects_only(deployment: Deployment) -> None:
    values = {
        f"{ids.URL}.pathname": "/run",
        f"{ids.URL}.search": f"?run={ALPHA_RUN}",
        f"{ids.RUN_VIEW}.data": {"run": ALPHA_RUN},
        f"{ids.RUN_ZOOM}.data": {},
        f"{ids.RUN_METRICS}.value": [],
    }
    with oidc_sign_in(deployment.server.url, "erin") as erin:  # beta's admin
        callbacks = _callbacks(erin)
        asked = 0
        for callback in callbacks:
            body = _body(callback, values)
            if body is None:
                continue
            asked += 1
            answer = erin.post("/_dash-update-component", json=body)
            assert answer.status_code not in (401, 403), callback["output"]
            assert SECRET not in answer.text and "project alpha" not in answer.text
        assert asked >= 10
        route = next(c for c in callbacks if c["output"] == f"{ids.PAGE}.children")
        body = _body(route, values)
        assert body is not None
        assert "Run not found" in erin.post("/_dash-update-component", json=body).text
    with oidc_sign_in(deployment.server.url, "bob") as bob:  # alpha's admin, by group
        seen = bob.post("/_dash-update-component", json=body)
        assert seen.status_code == 200 and "project alpha" in seen.text


def test_a_groups_claim_maps_a_person_and_roles_narrow_admin_work(
    deployment: Deployment,
) -> None:
    with oidc_sign_in(deployment.server.url, "bob") as bob:
        assert bob.get("/api/v1/me").json()["projects"] == [{"project": "alpha", "role": "admin"}]
        made = bob.post("/api/v1/silences", json={"project": "alpha", "until": 2e9})
        assert made.status_code == 201, made.text
        theirs = bob.post("/api/v1/silences", json={"project": "beta", "until": 2e9})
        assert theirs.status_code in (403, 404)


def test_changes_name_the_person_who_made_them(deployment: Deployment) -> None:
    server = deployment.server
    with oidc_sign_in(server.url, "bob") as bob:
        made = bob.post(
            "/api/v1/silences", json={"project": "alpha", "until": 2e9, "comment": "deploy"}
        ).json()
        assert bob.delete(f"/api/v1/silences/{made['id']}").status_code == 204
    with oidc_sign_in(server.url, "alice") as alice:
        listed = alice.get("/api/v1/changes", params={"kind": "silence"}).json()["data"]
    mine = [c for c in listed if c["object_id"] == made["id"]]
    assert deployment.provider is not None
    bob = (f"person:{deployment.provider.issuer}#u-bob", "bob@lab.example")
    assert [(c["action"], c["actor"], c["actor_name"]) for c in mine] == [
        ("delete", *bob),
        ("create", *bob),
    ]
    beta = server.query("/api/v1/changes", token=deployment.tokens["admin_beta"])["data"]
    assert all(c["project"] == "beta" for c in beta)


def test_a_removed_mapping_ends_access_at_the_next_request(deployment: Deployment) -> None:
    server, admin = deployment.server, deployment.tokens["server_admin"]
    assert deployment.provider is not None
    carol_id = f"{deployment.provider.issuer}#u-carol"
    mapping = {"kind": "user", "name": carol_id, "project": "beta", "role": "read"}
    put = web.put(
        f"{server.url}/api/v1/members",
        json=mapping,
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    )
    assert put.status_code == 200, put.text
    with oidc_sign_in(server.url, "carol") as carol:
        assert carol.get("/api/v1/runs").status_code == 200
        assert carol.get("/_dash-layout").status_code == 200
        removed = web.delete(
            f"{server.url}/api/v1/members",
            params={k: mapping[k] for k in ("kind", "name", "project")},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=30,
        )
        assert removed.status_code == 204
        assert carol.get("/api/v1/runs").status_code == 403
        assert carol.get("/_dash-layout").status_code == 403
        page = carol.get("/runs", headers={"Accept": "text/html"})
        assert page.status_code == 403 and "no project is mapped to you" in page.text


def test_an_unverified_email_does_not_stand_for_its_owner(deployment: Deployment) -> None:
    with oidc_sign_in(deployment.server.url, "eve") as eve:  # claims alice's address
        answer = eve.get("/api/v1/runs")
        assert answer.status_code == 403 and ALPHA_RUN not in answer.text


def test_a_forged_state_is_refused(deployment: Deployment) -> None:
    with httpx.Client(base_url=deployment.server.url, timeout=30) as client:
        start = client.get("/login/oidc", params={"next": "/"})
        back = provider_login(start.headers["location"], "alice")
        forged = back.replace(_state(back), "forged-state-value")
        answer = client.get(forged)
        assert answer.status_code == 401 and "mm_session" not in client.cookies
        assert "not started in this browser" in answer.text


def test_a_replayed_callback_is_refused(deployment: Deployment) -> None:
    with httpx.Client(base_url=deployment.server.url, timeout=30) as client:
        start = client.get("/login/oidc", params={"next": "/"})
        bound = client.cookies["mm_oidc"]
        back = provider_login(start.headers["location"], "alice")
        assert "mm_session" in client.get(back).headers["set-cookie"]  # the first use signs in
    with httpx.Client(base_url=deployment.server.url, timeout=30) as replay:
        replay.cookies.set("mm_oidc", bound)  # the same browser's state cookie, copied
        answer = replay.get(back)
        assert answer.status_code == 401 and "already used" in answer.text
        assert "mm_session" not in replay.cookies


def test_a_state_started_in_another_browser_is_refused(deployment: Deployment) -> None:
    """Login CSRF: a callback URL made in the attacker's browser, opened in the victim's."""
    url = deployment.server.url
    with httpx.Client(base_url=url, timeout=30) as attacker:
        start = attacker.get("/login/oidc", params={"next": "/"})
        back = provider_login(start.headers["location"], "carol")
    with httpx.Client(base_url=url, timeout=30) as victim:
        victim.get("/login/oidc", params={"next": "/"})  # has a state cookie of its own
        answer = victim.get(back)
        assert answer.status_code == 401 and "mm_session" not in victim.cookies


def _sign_in_with_a_forged_id_token(
    deployment: Deployment, **forged: Any
) -> tuple[httpx.Response, bool]:
    """Alice signs in while the provider forges its ID tokens (`Provider.forging`): the answer
    to the callback, and whether it left a session cookie."""
    provider = deployment.provider
    assert provider is not None
    url = deployment.server.url
    with provider.forging(**forged), httpx.Client(base_url=url, timeout=30) as client:
        start = client.get("/login/oidc", params={"next": "/"})
        answer = client.get(provider_login(start.headers["location"], "alice"))
        return answer, "mm_session" in client.cookies


def test_an_id_token_with_another_nonce_is_refused(deployment: Deployment) -> None:
    answer, session = _sign_in_with_a_forged_id_token(deployment, nonce="another-sign-in")
    assert answer.status_code == 401 and not session
    assert "the ID token was refused: invalid_claim: Invalid claim: 'nonce'" in _refusal(answer)


def test_an_id_token_issued_to_another_client_is_refused(deployment: Deployment) -> None:
    answer, session = _sign_in_with_a_forged_id_token(deployment, aud=["another-client"])
    assert answer.status_code == 401 and not session
    assert "the ID token was refused: invalid_claim: Invalid claim: 'aud'" in _refusal(answer)


def test_an_id_token_from_another_issuer_is_refused(deployment: Deployment) -> None:
    answer, session = _sign_in_with_a_forged_id_token(deployment, iss="https://idp.example.org")
    assert answer.status_code == 401 and not session
    assert "the ID token was refused: invalid_claim: Invalid claim: 'iss'" in _refusal(answer)


def test_an_id_token_signed_by_a_key_the_provider_does_not_publish_is_refused(
    deployment: Deployment,
) -> None:
    """Signed under the id of the provider's published key, by another key: only the signature
    tells them apart."""
    other = RSAKey.generate_key(2048, parameters={"kid": "test-key-1", "use": "sig"})
    answer, session = _sign_in_with_a_forged_id_token(deployment, signed_by=other)
    assert answer.status_code == 401 and not session
    assert "the ID token was refused: bad_signature" in _refusal(answer)


def test_signing_out_ends_a_persons_session(deployment: Deployment) -> None:
    url = deployment.server.url
    with oidc_sign_in(url, "alice") as alice:
        cookie = alice.cookies["mm_session"]
        assert alice.get("/_dash-layout").status_code == 200
        out = alice.post("/logout", headers={"Origin": url}, follow_redirects=False)
        assert out.status_code == 303
    copy = web.get(url + "/_dash-layout", cookies={"mm_session": cookie}, timeout=30)
    assert copy.status_code == 401


def _refusal(page: httpx.Response) -> str:
    """What the sign-in page says went wrong, as text."""
    return html.unescape(page.text)


def _state(callback_url: str) -> str:
    return parse_qs(urlsplit(callback_url).query)["state"][0]


@pytest.mark.browser
def test_chromium_signs_in_through_the_provider_and_lands_on_the_deep_link(
    deployment: Deployment,
) -> None:
    """An alert's link while signed out, "Sign in with your organisation's account", the
    provider's own login page, and back on the run's view with its zoom; then another
    project's run is as unknown as a missing one."""
    url, provider = deployment.server.url, deployment.provider
    assert provider is not None
    link = f"{url}/run?run={ALPHA_RUN}&step_min=10&step_max=30"
    with launched() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(link)
        page.click("#sso")
        page.wait_for_selector("#username")
        assert page.url.startswith(provider.issuer + "/authorize")
        page.fill("#username", "alice")
        page.fill("#password", PASSWORD)
        page.click("#provider-submit")
        page.wait_for_selector(f"#{ids.RUN_TITLE}")
        assert page.url.startswith(f"{url}/run?run={ALPHA_RUN}")
        assert "step_min=10&step_max=30" in page.url
        assert "project alpha" in page.inner_text(f"#{ids.RUN_SUBTITLE}")
        cookies = {c["name"]: c for c in context.cookies(url)}
        session = cookies["mm_session"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        page.goto(f"{url}/run?run={BETA_RUN}")
        page.wait_for_selector("text=Run not found")
        assert SECRET not in page.content()
        context.close()
