"""Who did what, in the dashboard of a shared deployment: the header names whoever is signed
in (a person with their role in each project, or a token), and the activity page names the
person who last changed a rule or a silence, within the reader's projects only."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from dashboard import ids
from server.domain import urls
from tests.dashboard.chromium import launched
from tests.dashboard.test_browser import shot
from tests.security.conftest import PASSWORD, SECRET, Deployment, oidc_sign_in
from tests.security.test_dashboard_signin import _body, _callbacks, signed_in
from tests.waiting import wait_for

pytestmark = pytest.mark.security

FETCH = """async ([path, body]) => {
  const answer = await fetch(path, {method: "POST", body: JSON.stringify(body),
                                    headers: {"Content-Type": "application/json"}});
  return [answer.status, await answer.json()];
}"""
"""A write from the dashboard's own page, with the browser's session cookie."""


def test_the_header_names_the_person_or_token_signed_in(deployment: Deployment) -> None:
    url = deployment.server.url
    with oidc_sign_in(url, "alice") as alice:
        layout = alice.get("/_dash-layout").text
        assert "Signed in as alice@lab.example (read of alpha)" in layout
        assert ids.SIGN_OUT in layout
    with oidc_sign_in(url, "bob") as bob:  # alpha's admin, by group
        assert "Signed in as bob@lab.example (admin of alpha)" in bob.get("/_dash-layout").text
    with signed_in(deployment, "read_beta") as token:
        token_id = deployment.token_ids["read_beta"]
        layout = token.get("/_dash-layout").text
        assert f"Signed in as token {token_id} (read of beta)" in layout


def test_the_activity_callback_shows_a_person_their_projects_changes_only(
    deployment: Deployment,
) -> None:
    """Asked for alpha's changes, beta's admin gets none, and nothing of alpha's silence
    comment; alpha's reader, asking the same, gets alpha's rule, receiver and silence."""
    values = {f"{ids.ACT_PROJECT}.value": "alpha", f"{ids.ACT_POLL}.n_intervals": 1}
    url = deployment.server.url
    with oidc_sign_in(url, "erin") as erin:
        callback = _activity_callback(erin)
        body = _body(callback, values)
        answer = erin.post("/_dash-update-component", json=body)
        assert answer.status_code == 200, answer.text
        assert _tables(answer.json()) == ([], [])
        assert SECRET not in answer.text and deployment.ids["rule_id"] not in answer.text
    with oidc_sign_in(url, "alice") as alice:
        seen = alice.post("/_dash-update-component", json=body)
        last, recent = _tables(seen.json())
        assert {row["kind"] for row in last} >= {"rule", "receiver", "silence", "reference"}
        assert {row["project"] for row in last + recent} == {"alpha"}
        assert SECRET in seen.text  # the silence's comment: alpha's reader may see it


def _activity_callback(client: httpx.Client) -> dict[str, Any]:
    return next(c for c in _callbacks(client) if ids.ACT_LAST in c["output"])


def _tables(answer: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    response = answer["response"]
    return response[ids.ACT_LAST]["data"], response[ids.ACT_RECENT]["data"]


def _sign_in(browser: Any, url: str, username: str, path: str) -> tuple[Any, Any]:
    """A fresh browser context signed in as `username` through the provider's login page,
    landed on `path`."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(url + path)
    page.click("#sso")
    page.wait_for_selector("#username")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("#provider-submit")
    page.wait_for_selector(f"#{ids.SIGNED_IN_AS}")
    assert page.url.startswith(url + path)
    return context, page


def _table_text(page: Any, table: str, needle: str) -> str | None:
    text = str(page.inner_text(f"#{table}"))
    return text if needle in text else None


@pytest.mark.browser
def test_chromium_shows_the_person_who_saved_a_rule_and_silenced_its_alert(
    deployment: Deployment,
) -> None:
    """bob saves a rule and silences its alert from the dashboard's page; the activity page
    then names him as the changer of both, with how long ago. erin, of beta, opens the same
    page (asking for alpha in its link) and sees her own change and none of alpha's."""
    url = deployment.server.url
    with launched() as browser:
        context, page = _sign_in(browser, url, "bob", urls.ACTIVITY)
        assert page.inner_text(f"#{ids.SIGNED_IN_AS}") == (
            "Signed in as bob@lab.example (admin of alpha)"
        )
        assert page.locator(f"#{ids.SIGN_OUT}").count() == 1
        rule = {
            "project": "alpha",
            "name": "bob's k3 watch",
            "kind": "threshold",
            "metric": "k3_kl",
            "params": {"threshold": 1e6, "direction": "above"},
        }
        status, made = page.evaluate(FETCH, ["/api/v1/rules", rule])
        assert status == 201, made
        silence = {"project": "alpha", "rule_id": made["id"], "until": time.time() + 3600}
        status, muted = page.evaluate(FETCH, ["/api/v1/silences", {**silence, "comment": "ack"}])
        assert status == 201, muted
        page.reload()
        text = wait_for(
            lambda: _table_text(page, ids.ACT_LAST, muted["id"]),
            30,
            interval=0.2,
            message="the silence never showed on the activity page",
        )
        lines = text.splitlines()
        for object_id in (made["id"], muted["id"]):
            line = next(x for x in lines if object_id in x)
            assert deployment.provider is not None
            bob = f"person {deployment.provider.issuer}#u-bob (bob@lab.example)"
            assert f"changed by {bob} · just now" in line, line
        recent = str(page.inner_text(f"#{ids.ACT_RECENT}"))
        assert "bob's k3 watch" in recent and "bob@lab.example" in recent
        shot(page, "activity")
        context.close()

        context, page = _sign_in(browser, url, "erin", urls.ACTIVITY + "?project=alpha")
        status, theirs = page.evaluate(
            FETCH, ["/api/v1/silences", {"project": "beta", "until": time.time() + 60}]
        )
        assert status == 201, theirs
        page.reload()
        text = wait_for(
            lambda: _table_text(page, ids.ACT_LAST, theirs["id"]),
            30,
            interval=0.2,
            message="erin's own change never showed on the activity page",
        )
        shown = text + page.inner_text(f"#{ids.ACT_RECENT}") + page.content()
        for alpha in (made["id"], muted["id"], deployment.ids["rule_id"], SECRET, "bob@lab"):
            assert alpha not in shown
        assert "#u-erin (erin@lab.example)" in text
        context.close()
