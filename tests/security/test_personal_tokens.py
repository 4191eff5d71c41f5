"""A person's own API tokens, through a real server: made by the signed-in person (or by the
server admin on the command line), acting with that person's mappings at each request, so
removing the mapping ends the token at its next request; never made from another token,
never ingesting, revoked by its owner only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from server.identity.members import Members
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork, web
from tests.conftest import ServerProcess
from tests.factories import batch
from tests.security.conftest import (
    ALPHA_RUN,
    BETA_RUN,
    SECRET,
    Deployment,
    oidc_sign_in,
    on_each_database,
)

pytestmark = pytest.mark.security

ALICE = "https://sso.lab#alice"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def mapped(deployment: Deployment, name: str, project: str, role: str) -> Iterator[dict[str, str]]:
    """`name` mapped to `project` for the block (by the server admin, over the API)."""
    mapping = {"kind": "user", "name": name, "project": project, "role": role}
    admin = bearer(deployment.tokens["server_admin"])
    url = deployment.server.url + "/api/v1/members"
    assert web.put(url, json=mapping, headers=admin, timeout=30).status_code == 200
    try:
        yield mapping
    finally:
        key = {k: mapping[k] for k in ("kind", "name", "project")}
        web.delete(url, params=key, headers=admin, timeout=30)


@on_each_database
def test_a_persons_token_acts_as_them_until_their_mapping_goes(deployment: Deployment) -> None:
    url = deployment.server.url
    assert deployment.provider is not None
    carol_id = f"{deployment.provider.issuer}#u-carol"
    with mapped(deployment, carol_id, "beta", "read") as mapping:
        with oidc_sign_in(url, "carol") as carol:
            made = carol.post("/api/v1/me/tokens", json={"name": "notebook"})
            assert made.status_code == 201, made.text
            token = made.json()["token"]
            assert (made.json()["owner"], made.json()["shown"]) == (carol_id, "carol@lab.example")
            listed = carol.get("/api/v1/me/tokens").json()["data"]
            assert [t["id"] for t in listed] == [made.json()["id"]]
        with httpx.Client(base_url=url, headers=bearer(token), timeout=30) as script:
            me = script.get("/api/v1/me").json()
            assert me["user"] == "carol@lab.example" and me["actor"] == f"person:{carol_id}"
            assert me["projects"] == [{"project": "beta", "role": "read"}]
            runs = script.get("/api/v1/runs")
            assert {r["project"] for r in runs.json()["data"]} == {"beta"}
            assert SECRET not in runs.text and ALPHA_RUN not in runs.text
            assert script.get(f"/api/v1/runs/{ALPHA_RUN}").status_code == 404
            assert BETA_RUN in script.get("/metrics").text
            body = batch(BETA_RUN, range(100, 101), project="beta")
            assert script.post("/api/v1/ingest", json=body).status_code == 403  # people read
            again = script.post("/api/v1/me/tokens", json={})
            assert again.status_code == 403  # not from another token
            admin = bearer(deployment.tokens["server_admin"])
            key = {k: mapping[k] for k in ("kind", "name", "project")}
            gone = web.delete(url + "/api/v1/members", params=key, headers=admin, timeout=30)
            assert gone.status_code == 204
            refused = script.get("/api/v1/runs")
            assert refused.status_code == 403 and "no project is mapped" in refused.text
            assert BETA_RUN not in script.get("/metrics").text


@on_each_database
def test_a_token_is_made_from_a_sign_in_only_and_revoked_by_its_owner(
    deployment: Deployment,
) -> None:
    url = deployment.server.url
    for kind in ("read_alpha", "server_admin"):  # machine tokens have no person
        made = web.post(
            url + "/api/v1/me/tokens", json={}, headers=deployment.headers(kind), timeout=30
        )
        assert made.status_code == 403, made.text
    with oidc_sign_in(url, "alice") as alice:
        token = alice.post("/api/v1/me/tokens", json={}).json()
    with oidc_sign_in(url, "dave") as dave:  # someone else's token is unknown to him
        assert dave.delete(f"/api/v1/me/tokens/{token['id']}").status_code == 404
    assert web.get(url + "/api/v1/runs", headers=bearer(token["token"])).status_code == 200
    with oidc_sign_in(url, "alice") as alice:
        revoked = alice.delete(f"/api/v1/me/tokens/{token['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert alice.get("/api/v1/me/tokens").json()["data"] == []
    answer = web.get(url + "/api/v1/runs", headers=bearer(token["token"]), timeout=30)
    assert answer.status_code == 401 and "revoked" in answer.text
    forged = token["token"][:-4] + "AAAA"
    assert web.get(url + "/api/v1/runs", headers=bearer(forged)).status_code == 401


@on_each_database
def test_a_person_mapped_by_group_only_is_told_to_ask_for_a_mapping_of_their_own(
    deployment: Deployment,
) -> None:
    """bob reads alpha through his group; a token knows no groups, so it could do nothing."""
    with oidc_sign_in(deployment.server.url, "bob") as bob:
        refused = bob.post("/api/v1/me/tokens", json={})
        assert refused.status_code == 422 and "mismatch member add" in refused.text


def test_the_server_admin_makes_a_users_token_on_the_command_line(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    db_path = str(tmp_path / "cli.duckdb")
    db = Database(db_path)
    migrate.upgrade(db)
    _, admin = TokenService(db).create(project=None, scope="server-admin")
    _, ingest = TokenService(db).create(project="grpo", scope="ingest")
    Members(db).add(kind="user", name=ALICE, project="grpo", role="admin")
    db.dispose()
    made = prefork.mismatch(
        "token", "create", "--user", ALICE, "--name", "ci", "--db", db_path, timeout=120
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("mm_p") and "personal token" in made.stderr
    nobody = prefork.mismatch(
        "token", "create", "--user", "https://sso.lab#nobody", "--db", db_path, timeout=120
    )
    assert nobody.returncode != 0 and "no project is mapped" in nobody.stderr
    server = server_factory(db_path)
    stored = server.post("/api/v1/ingest", batch("run-1", range(3), project="grpo"), token=ingest)
    assert stored.status_code == 200, stored.text
    silence = server.post("/api/v1/silences", {"project": "grpo", "until": 2e9}, token=token)
    assert silence.status_code == 201, silence.text  # alice administers grpo
    changes = server.query("/api/v1/changes?kind=silence", token=admin)["data"]
    assert [c["actor"] for c in changes] == [f"person:{ALICE}"]
    removed = web.delete(
        server.url + "/api/v1/members",
        params={"kind": "user", "name": ALICE, "project": "grpo"},
        headers=bearer(admin),
        timeout=30,
    )
    assert removed.status_code == 204
    assert server.get("/api/v1/runs", token=token).status_code == 403
