"""Who may call what, read from the server itself: every operation of the OpenAPI document and
every callback of the dashboard's callback map, with every kind of token of both projects and
every kind of person (signed in through the OIDC provider: reader, admin, no mapping), aimed
at project alpha's data. An operation missing from `ACCESS` fails the test: a new endpoint
must say who may call it, and is then checked like the others."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests import web
from tests.factories import batch
from tests.security.conftest import ALPHA_RUN, PEOPLE, SECRET, Deployment

pytestmark = pytest.mark.security

ACCESS: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "public",
    ("GET", "/metrics"): "read",
    ("POST", "/api/v1/ingest"): "ingest",
    ("GET", "/api/v1/projects"): "read",
    ("GET", "/api/v1/runs"): "read",
    ("GET", "/api/v1/trends"): "read",
    ("GET", "/api/v1/runs/{run_id}"): "read",
    ("GET", "/api/v1/runs/{run_id}/metrics"): "read",
    ("GET", "/api/v1/runs/{run_id}/series"): "read",
    ("GET", "/api/v1/series"): "read",
    ("GET", "/api/v1/export"): "read",
    ("GET", "/api/v1/runs/{run_id}/buckets"): "read",
    ("GET", "/api/v1/runs/{run_id}/bucket-steps"): "read",
    ("GET", "/api/v1/runs/{run_id}/exemplars"): "read",
    ("GET", "/api/v1/runs/{run_id}/attribution"): "read",
    ("GET", "/api/v1/hardware"): "read",
    ("GET", "/api/v1/hardware/report"): "read",
    ("POST", "/api/v1/tokens"): "admin",
    ("GET", "/api/v1/tokens"): "admin",
    ("DELETE", "/api/v1/tokens/{token_id}"): "admin",
    ("GET", "/api/v1/rules"): "read",
    ("POST", "/api/v1/rules"): "admin",
    ("PATCH", "/api/v1/rules/{rule_id}"): "admin",
    ("DELETE", "/api/v1/rules/{rule_id}"): "admin",
    ("GET", "/api/v1/receivers"): "admin",
    ("POST", "/api/v1/receivers"): "admin",
    ("DELETE", "/api/v1/receivers/{receiver_id}"): "admin",
    ("POST", "/api/v1/receivers/{receiver_id}/test"): "admin",
    ("GET", "/api/v1/silences"): "read",
    ("POST", "/api/v1/silences"): "admin",
    ("DELETE", "/api/v1/silences/{silence_id}"): "admin",
    ("GET", "/api/v1/alerts"): "read",
    ("GET", "/api/v1/incidents"): "read",
    ("GET", "/api/v1/incidents/{incident_id}"): "read",
    ("POST", "/api/v1/incidents/{incident_id}/ack"): "admin",
    ("POST", "/api/v1/maintenance/retention"): "admin",
    ("POST", "/api/v1/rules/backtest"): "read",
    ("POST", "/api/v1/rules/defaults"): "admin",
    ("GET", "/api/v1/projects/{project}/reference"): "read",
    ("PUT", "/api/v1/projects/{project}/reference"): "admin",
    ("GET", "/api/v1/me"): "read",
    ("GET", "/api/v1/members"): "admin",
    ("PUT", "/api/v1/members"): "admin",
    ("DELETE", "/api/v1/members"): "admin",
    ("GET", "/api/v1/changes"): "read",
    ("POST", "/api/v1/me/tokens"): "person",
    ("GET", "/api/v1/me/tokens"): "person",
    ("DELETE", "/api/v1/me/tokens/{personal_id}"): "person",
}
"""Levels: public, ingest, read, admin (of project alpha), and person: any person with a
mapped project (a person's own tokens), never a machine token."""
TOKENS = (
    None,
    *(f"{kind}_{project}" for project in ("alpha", "beta") for kind in ("ingest", "read", "admin")),
    "server_admin",
    *PEOPLE,
)
MEMBER = {"kind": "email", "name": "matrix@lab.example", "project": "alpha"}
QUERY = {
    "/api/v1/runs/{run_id}/series": {"metric": "k3_kl"},
    "/api/v1/series": {"runs": ALPHA_RUN, "metric": "k3_kl"},
    "/api/v1/trends": {"runs": ALPHA_RUN},
    "/api/v1/export": {"runs": ALPHA_RUN},
    "/api/v1/hardware": {"runs": ALPHA_RUN},
    "/api/v1/hardware/report": {"runs": ALPHA_RUN},
    "/api/v1/members": MEMBER,
}
RULE = {"project": "alpha", "name": "r", "kind": "threshold", "metric": "k3_kl",
        "params": {"threshold": 1e9, "direction": "above"}}  # fmt: skip


def body_for(method: str, path: str) -> Any:
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/api/v1/ingest"): batch(ALPHA_RUN, range(100, 101), project="alpha"),
        ("POST", "/api/v1/tokens"): {"project": "alpha", "scope": "read"},
        ("POST", "/api/v1/rules"): RULE,
        ("PATCH", "/api/v1/rules/{rule_id}"): {"enabled": False},
        ("POST", "/api/v1/receivers"): {"project": "alpha", "url": "http://127.0.0.9:9/x"},
        ("POST", "/api/v1/silences"): {"project": "alpha", "until": time.time() + 60},
        ("POST", "/api/v1/rules/backtest"): {"run": ALPHA_RUN, "project": "alpha"},
        ("POST", "/api/v1/rules/defaults"): {"project": "alpha"},
        ("PUT", "/api/v1/projects/{project}/reference"): {"run": ALPHA_RUN},
        ("POST", "/api/v1/incidents/{incident_id}/ack"): {"comment": "looking"},
        ("PUT", "/api/v1/members"): {**MEMBER, "role": "read"},
        ("POST", "/api/v1/maintenance/retention"): {
            "project": "alpha",
            "older_than_s": 1e9,
            "dry_run": True,
        },
    }
    return bodies.get((method, path))


def fresh(deployment: Deployment, name: str, caller: str | None) -> str:
    """A new resource of alpha for an operation that changes or removes one, so each call of
    the matrix finds it there whatever the calls before it did; a personal token is the
    caller's own where the caller is a person who can make one."""
    server, admin = deployment.server, deployment.tokens["server_admin"]
    if name == "personal_id":
        made = web.post(
            server.url + "/api/v1/me/tokens", json={}, cookies=deployment.cookies(caller)
        )
        return str(made.json()["id"]) if made.status_code == 201 else "p000000000000"
    if name == "token_id":
        return str(
            server.post("/api/v1/tokens", body_for("POST", "/api/v1/tokens"), token=admin).json()[
                "id"
            ]
        )
    made = {
        "rule_id": ("/api/v1/rules", RULE),
        "receiver_id": ("/api/v1/receivers", body_for("POST", "/api/v1/receivers")),
        "silence_id": ("/api/v1/silences", body_for("POST", "/api/v1/silences")),
    }
    if name in made:
        path, body = made[name]
        return str(server.post(path, body, token=admin).json()["id"])
    return deployment.ids[name]


def allowed(level: str, token: str) -> bool:
    if level == "person":
        return token.startswith("person-") and token != "person-none"
    if level == "public" or token == "server_admin":
        return True
    if token == "person-none":
        return False
    kind, project = token.removeprefix("person-").split("_")
    if token.startswith("person-") and level == "ingest":
        return False  # people read and administer; only tokens ingest
    if project != "alpha":
        return False
    return {"read": kind in ("read", "admin"), "admin": kind == "admin"}.get(
        level, kind in ("ingest", "admin")
    )


def operations(deployment: Deployment) -> list[tuple[str, str]]:
    document = web.get(deployment.server.url + "/openapi.json", timeout=30).json()
    return [
        (method.upper(), path)
        for path, ops in document["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_every_operation_declares_who_may_call_it(deployment: Deployment) -> None:
    found = set(operations(deployment))
    assert found - ACCESS.keys() == set(), "add these operations to ACCESS"
    assert ACCESS.keys() - found == set(), "these operations are gone from the API"


@pytest.mark.parametrize("token", TOKENS, ids=lambda t: t or "no-token")
def test_each_operation_answers_each_token_as_its_scope_and_project_say(
    deployment: Deployment, token: str | None
) -> None:
    server = deployment.server
    wrong: list[str] = []
    for method, path in operations(deployment):
        level = ACCESS[(method, path)]
        target = path
        target = target.replace("{project}", "alpha")
        names = ("run_id", "token_id", "rule_id", "receiver_id", "silence_id", "personal_id")
        for name in (*names, "incident_id"):
            if "{" + name + "}" in target:
                value = fresh(deployment, name, token) if method != "GET" else deployment.ids[name]
                target = target.replace("{" + name + "}", value)
        params = dict(QUERY.get(path, {})) if method in ("GET", "DELETE") else {}
        if (method, path) == ("DELETE", "/api/v1/members"):  # a mapping for it to remove
            mapped = web.put(
                server.url + path,
                json=body_for("PUT", path),
                headers=deployment.headers("server_admin"),
                timeout=60,
            )
            assert mapped.status_code == 200, mapped.text
        response = web.request(
            method,
            server.url + target,
            params=params,
            json=body_for(method, path),
            headers=deployment.headers(token),
            cookies=deployment.cookies(token),
            timeout=60,
        )
        status, text = response.status_code, response.text
        asked = target + str(params) + str(body_for(method, path))
        leak = SECRET in text or (ALPHA_RUN in text and ALPHA_RUN not in asked)
        case = f"{method} {path} with {token or 'no token'} -> {status} {text[:200]}"
        if status >= 500:
            wrong.append("server error: " + case)
        elif level == "public":
            if status in (401, 403):
                wrong.append("refused a public operation: " + case)
        elif token is None:
            if status != 401 or leak:
                wrong.append("answered without a token: " + case)
        elif allowed(level, token):
            # A person's own tokens: 404 is another person's token, 422 a person whose
            # projects come through groups only (a token knows none); neither is a refusal.
            if status in ((401, 403) if level == "person" else (401, 403, 404)):
                wrong.append("refused an allowed caller: " + case)
        elif leak or not (status in (403, 404) or (method == "GET" and status == 200)):
            wrong.append("let another project's or a lesser token through: " + case)
    assert wrong == []


def test_another_projects_run_is_as_unknown_as_a_missing_one(deployment: Deployment) -> None:
    """Same status, same words (but the id) for alpha's run and a run nobody has."""
    server, token = deployment.server, deployment.headers("admin_beta")
    for template in ("/api/v1/runs/{}", "/api/v1/runs/{}/series?metric=k3_kl"):
        theirs = web.get(server.url + template.format(ALPHA_RUN), headers=token, timeout=30)
        nobodys = web.get(server.url + template.format("no-such-run"), headers=token, timeout=30)
        assert theirs.status_code == nobodys.status_code == 404
        assert theirs.text.replace(ALPHA_RUN, "X") == nobodys.text.replace("no-such-run", "X")
    records = {"records": batch(ALPHA_RUN, range(1), with_run=False)["records"]}
    theirs = server.post("/api/v1/ingest", records, token=deployment.tokens["ingest_beta"])
    missing = {"records": batch("no-such-run", range(1), with_run=False)["records"]}
    nobodys = server.post("/api/v1/ingest", missing, token=deployment.tokens["ingest_beta"])
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.text.replace(ALPHA_RUN, "X") == nobodys.text.replace("no-such-run", "X")


def test_a_shared_run_id_names_each_projects_own_run(deployment: Deployment) -> None:
    server = deployment.server
    alpha = server.query("/api/v1/runs/grpo-v1", token=deployment.tokens["read_alpha"])
    beta = server.query("/api/v1/runs/grpo-v1", token=deployment.tokens["read_beta"])
    assert (alpha["project"], alpha["last_step"]) == ("alpha", 39)
    assert (beta["project"], beta["last_step"]) == ("beta", 4)
    both = server.get("/api/v1/runs/grpo-v1", token=deployment.tokens["server_admin"])
    assert both.status_code == 409 and "project=" in both.json()["detail"]


def test_an_admin_manages_only_its_own_project(deployment: Deployment) -> None:
    server, admin = deployment.server, deployment.tokens["admin_beta"]
    listed = server.query("/api/v1/tokens", token=admin)["data"]
    assert {t["project"] for t in listed} == {"beta"}
    minted = server.post("/api/v1/tokens", {"project": "alpha", "scope": "admin"}, token=admin)
    assert minted.status_code == 403
    assert server.query("/api/v1/receivers", token=admin)["data"] == []
    assert server.query("/api/v1/silences?project=alpha", token=admin)["data"] == []
    scrape = server.get("/metrics", token=deployment.tokens["read_beta"])
    assert scrape.status_code == 200 and ALPHA_RUN not in scrape.text
    assert "mismatch_ingest_batches" not in scrape.text  # server-wide counters: not a project's
    assert server.get("/metrics").status_code == 401
