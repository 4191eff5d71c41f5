"""An identity that cannot be borrowed, through a real server and the suite's OpenID provider:
a person is their issuer and subject. A name they choose (`preferred_username`) may read like
another person's address or like a token; it still reaches nobody else's tokens, is recorded
beside their own id in the record of changes, and a subject that reads like somebody's address
is not that address."""

from __future__ import annotations

import shlex

import pytest

from dashboard.pages.activity import recent_rows
from server.domain.identity import Change
from tests import web
from tests.security.conftest import Deployment, oidc_sign_in, on_each_database

pytestmark = [pytest.mark.security, on_each_database]

ALICE_EMAIL = "alice@lab.example"


def issuer(deployment: Deployment) -> str:
    assert deployment.provider is not None
    return deployment.provider.issuer


def admin(deployment: Deployment) -> dict[str, str]:
    return {"Authorization": f"Bearer {deployment.tokens['server_admin']}"}


def changes_of(deployment: Deployment, project: str) -> list[dict[str, str]]:
    answer = web.get(
        deployment.server.url + "/api/v1/changes",
        params={"project": project},
        headers=admin(deployment),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"])


def test_a_name_like_anothers_address_neither_lists_nor_revokes_their_tokens(
    deployment: Deployment,
) -> None:
    url = deployment.server.url
    with oidc_sign_in(url, "alice") as alice:
        made = alice.post("/api/v1/me/tokens", json={"name": "alice's notebook"})
        assert made.status_code == 201, made.text
        alices_token, alices_token_id = made.json()["token"], made.json()["id"]
        assert made.json()["owner"] == f"{issuer(deployment)}#u-alice"
    with oidc_sign_in(url, "mallory") as mallory:
        me = mallory.get("/api/v1/me").json()
        assert me["user"] == ALICE_EMAIL  # the name they chose, shown as they chose it
        assert me["id"] == f"{issuer(deployment)}#u-mallory"
        assert me["actor"] == f"person:{issuer(deployment)}#u-mallory"
        assert me["email"] is None
        listed = mallory.get("/api/v1/me/tokens").json()["data"]
        assert alices_token_id not in [t["id"] for t in listed]
        revoked = mallory.delete(f"/api/v1/me/tokens/{alices_token_id}")
        assert revoked.status_code == 404, revoked.text
    still = web.get(
        url + "/api/v1/me", headers={"Authorization": f"Bearer {alices_token}"}, timeout=30
    )
    assert still.status_code == 200, still.text
    assert still.json()["projects"] == [{"project": "alpha", "role": "read"}]


@pytest.mark.parametrize("account", ["mallory", "trudy"])
def test_a_chosen_name_never_passes_for_another_in_the_record_of_changes(
    deployment: Deployment, account: str
) -> None:
    """mallory calls themself alice's address, trudy calls themself "token 28aee556d1f2": each
    change they make is recorded under their own id, their chosen name beside it only."""
    url = deployment.server.url
    group = f"made-by-{account}"
    with oidc_sign_in(url, account) as person:
        chosen = person.get("/api/v1/me").json()["user"]
        mapping = {"kind": "group", "name": group, "project": "beta", "role": "read"}
        assert person.put("/api/v1/members", json=mapping).status_code == 200
    change = next(c for c in changes_of(deployment, "beta") if c["object_id"] == f"group:{group}")
    own = f"person:{issuer(deployment)}#u-{account}"
    assert (change["actor"], change["actor_name"]) == (own, chosen)
    shown = recent_rows([Change(**change)], now=change["changed_at"])[0]["who"]
    assert shown.startswith(f"person {issuer(deployment)}#u-{account}")
    assert not shown.startswith(("token", ALICE_EMAIL))


def test_a_subject_equal_to_anothers_address_gets_nothing_of_theirs(
    deployment: Deployment,
) -> None:
    """sybil's subject is the string alice@lab.example, alice's address: alice's e-mail
    mapping is not theirs, and the hint names the id a mapping of sybil would need."""
    with oidc_sign_in(deployment.server.url, "sybil") as sybil:
        me = sybil.get("/api/v1/me")
        runs = sybil.get("/api/v1/runs")
    assert me.status_code == runs.status_code == 403
    said = runs.json()["detail"]
    assert f"--name {shlex.quote(issuer(deployment) + '#' + ALICE_EMAIL)}" in said
    assert "alpha" not in runs.text


def test_the_hint_for_a_person_without_a_verified_address_names_what_maps_them(
    deployment: Deployment,
) -> None:
    """eve's address is not verified: the hint names their id, and the mapping it names does
    give them the project at their next request."""
    url = deployment.server.url
    with oidc_sign_in(url, "eve") as eve:
        refused = eve.get("/api/v1/runs")
        assert refused.status_code == 403
        said = refused.json()["detail"]
        person = f"{issuer(deployment)}#u-eve"
        assert f"--kind user --name {shlex.quote(person)}" in said
        assert "--kind email" not in said and ALICE_EMAIL not in said
        mapping = {"kind": "user", "name": person, "project": "beta", "role": "read"}
        members = url + "/api/v1/members"
        put = web.put(members, json=mapping, headers=admin(deployment), timeout=30)
        assert put.status_code == 200, put.text
        try:
            assert eve.get("/api/v1/runs").status_code == 200
        finally:
            key = {k: mapping[k] for k in ("kind", "name", "project")}
            web.delete(members, params=key, headers=admin(deployment), timeout=30)


def test_a_user_mapping_by_a_bare_name_is_refused_with_the_form_it_needs(
    deployment: Deployment,
) -> None:
    mapping = {"kind": "user", "name": ALICE_EMAIL, "project": "beta", "role": "read"}
    answer = web.put(
        deployment.server.url + "/api/v1/members",
        json=mapping,
        headers=admin(deployment),
        timeout=30,
    )
    assert answer.status_code == 422
    assert "ISSUER#SUBJECT" in answer.json()["detail"] and "kind email" in answer.json()["detail"]
