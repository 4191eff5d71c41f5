"""Small side channels of a shared deployment, closed: nothing a reader of project beta gets
moves with, or tells apart, what exists in project alpha.

- The runs page's change fingerprint (sent to the browser with every poll) counts the alerts
  firing on the reader's listed runs only; it used to count every project's.
- A rule, receiver or silence id of another project answers exactly what a made-up id answers;
  so do runs (their series, buckets, exemplars, hardware reports, backtests), references and
  tokens, whose answers name the id asked for and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dashboard import ids
from tests import web
from tests.factories import batch
from tests.security.conftest import ALPHA_RUN, Deployment

pytestmark = pytest.mark.security

RUNS_OUTPUTS = [
    (ids.RUNS_TABLE, "data"),
    (ids.RUNS_TABLE, "page_count"),
    (ids.RUNS_STATUS, "children"),
    (ids.RUNS_CURSORS, "data"),
    (ids.RUNS_VERSION, "data"),
    (ids.RUNS_PAGE_IDS, "data"),
    (ids.RUNS_REFRESH, "n_intervals"),
    (ids.RUNS_TABLE, "tooltip_data"),
]


def runs_poll(url: str, cookie: str) -> dict[str, Any]:
    """The runs page's poll, as the browser sends it to the callback endpoint: what the
    signed-in reader's page gets back, the fingerprint included."""
    inputs = [
        (ids.RUNS_FILTER_PROJECT, "value", None),
        (ids.RUNS_FILTER_LABEL, "value", None),
        (ids.RUNS_FILTER_TEXT, "value", None),
        (ids.RUNS_TABLE, "page_current", 0),
        (ids.RUNS_TABLE, "sort_by", []),
        (ids.RUNS_REFRESH, "n_intervals", 1),
    ]
    body = {
        "output": ".." + "...".join(f"{i}.{p}" for i, p in RUNS_OUTPUTS) + "..",
        "outputs": [{"id": i, "property": p} for i, p in RUNS_OUTPUTS],
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "state": [
            {"id": ids.RUNS_CURSORS, "property": "data", "value": None},
            {"id": ids.RUNS_VERSION, "property": "data", "value": None},
        ],
        "changedPropIds": [f"{ids.RUNS_REFRESH}.n_intervals"],
    }
    answer = web.post(
        f"{url}/_dash-update-component",
        json=body,
        cookies={"mm_session": cookie},
        headers={"Origin": url},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["response"])


def fingerprint(url: str, cookie: str) -> str:
    return str(runs_poll(url, cookie)[ids.RUNS_VERSION]["data"])


def sign_in(url: str, token: str) -> str:
    response = web.post(f"{url}/login", data={"token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return response.cookies["mm_session"]


def wait_for(condition: Any, *, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)  # polling interval of a bounded wait, not a synchronisation
    raise AssertionError(f"timed out waiting for {what}")


def test_the_runs_fingerprint_ignores_alerts_firing_in_another_project(
    deployment: Deployment,
) -> None:
    server, tokens = deployment.server, deployment.tokens
    alpha_reader = sign_in(server.url, tokens["read_alpha"])
    listed = runs_poll(server.url, alpha_reader)
    assert {r["id"] for r in listed[ids.RUNS_TABLE]["data"]} == {
        ALPHA_RUN,
        "grpo-v1",
        "alpha-collapse",  # the deployment's incident of alpha
    }
    before = fingerprint(server.url, alpha_reader)

    rule = {
        "project": "beta",
        "name": "k3 high",
        "kind": "threshold",
        "metric": "k3_kl",
        "params": {"threshold": 0.5, "direction": "above"},
    }
    assert server.post("/api/v1/rules", rule, token=tokens["admin_beta"]).status_code == 201
    spike = batch("beta-spike", range(5), project="beta", value=1.0)
    assert server.post("/api/v1/ingest", spike, token=tokens["ingest_beta"]).status_code == 200
    wait_for(
        lambda: server.query("/api/v1/alerts?state=firing", token=tokens["read_beta"])["data"],
        what="beta's alert to fire",
    )
    assert fingerprint(server.url, alpha_reader) == before


MISSING = {"rule_id": "rule_0a1b2c3d4e5f", "receiver_id": "rcv_0a1b2c3d4e5f",
           "silence_id": "sil_0a1b2c3d4e5f"}  # fmt: skip
ALARM_ITEMS: list[tuple[str, str, str, Any]] = [
    ("PATCH", "/api/v1/rules/{}", "rule_id", {"enabled": False}),
    ("DELETE", "/api/v1/rules/{}", "rule_id", None),
    ("DELETE", "/api/v1/receivers/{}", "receiver_id", None),
    ("POST", "/api/v1/receivers/{}/test", "receiver_id", None),
    ("DELETE", "/api/v1/silences/{}", "silence_id", None),
]


def call(deployment: Deployment, method: str, path: str, body: Any, token: str) -> httpx.Response:
    return web.request(
        method,
        deployment.server.url + path,
        json=body,
        headers=deployment.headers(token),
        timeout=30,
    )


@pytest.fixture
def beta_admin(deployment: Deployment) -> Iterator[str]:
    yield "admin_beta"
    for name in ("rule_id", "receiver_id", "silence_id"):  # alpha's things are all still there
        kind = name.split("_")[0] + "s"
        listed = deployment.server.query(f"/api/v1/{kind}", token=deployment.tokens["admin_alpha"])[
            "data"
        ]
        assert deployment.ids[name] in {item["id"] for item in listed}


@pytest.mark.parametrize(
    ("method", "template", "name", "body"),
    ALARM_ITEMS,
    ids=[f"{m} {t}" for m, t, *_ in ALARM_ITEMS],
)
def test_another_projects_alarm_item_answers_exactly_as_a_missing_one(
    deployment: Deployment, beta_admin: str, method: str, template: str, name: str, body: Any
) -> None:
    theirs = call(deployment, method, template.format(deployment.ids[name]), body, beta_admin)
    nobodys = call(deployment, method, template.format(MISSING[name]), body, beta_admin)
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.content == nobodys.content
    assert deployment.ids[name] not in theirs.text


OTHERS = [
    ("GET", "/api/v1/runs/{}", None),
    ("GET", "/api/v1/runs/{}/metrics", None),
    ("GET", "/api/v1/runs/{}/series?metric=k3_kl", None),
    ("GET", "/api/v1/runs/{}/buckets", None),
    ("GET", "/api/v1/runs/{}/bucket-steps", None),
    ("GET", "/api/v1/runs/{}/exemplars", None),
    ("GET", "/api/v1/runs/{}/attribution", None),
    ("GET", "/api/v1/series?metric=k3_kl&runs={}", None),
    ("GET", "/api/v1/hardware?runs={}", None),
    ("GET", "/api/v1/hardware/report?runs={}", None),
    ("POST", "/api/v1/rules/backtest", {"run": "{}"}),
    ("PUT", "/api/v1/projects/beta/reference", {"run": "{}"}),
]


@pytest.mark.parametrize(
    ("method", "template", "body"), OTHERS, ids=[f"{m} {t}" for m, t, _ in OTHERS]
)
def test_another_projects_run_answers_as_a_missing_one_but_for_the_id_asked(
    deployment: Deployment, method: str, template: str, body: Any
) -> None:
    def ask(run_id: str) -> httpx.Response:
        filled = None if body is None else {k: v.format(run_id) for k, v in body.items()}
        return call(deployment, method, template.format(run_id), filled, "admin_beta")

    theirs, nobodys = ask(ALPHA_RUN), ask("no-such-run")
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.text.replace(ALPHA_RUN, "X") == nobodys.text.replace("no-such-run", "X")


@pytest.mark.parametrize(
    ("method", "template"),
    [("GET", "/api/v1/projects/{}/reference"), ("PUT", "/api/v1/projects/{}/reference")],
)
def test_another_project_answers_as_a_missing_one(
    deployment: Deployment, method: str, template: str
) -> None:
    body = {"run": ALPHA_RUN} if method == "PUT" else None
    theirs = call(deployment, method, template.format("alpha"), body, "admin_beta")
    nobodys = call(deployment, method, template.format("gamma"), body, "admin_beta")
    assert theirs.status_code == nobodys.status_code
    assert theirs.text.replace("alpha", "X") == nobodys.text.replace("gamma", "X")


def test_another_projects_token_answers_as_a_missing_one(deployment: Deployment) -> None:
    theirs = call(
        deployment, "DELETE", f"/api/v1/tokens/{deployment.ids['token_id']}", None, "admin_beta"
    )
    nobodys = call(deployment, "DELETE", "/api/v1/tokens/0a1b2c3d4e5f", None, "admin_beta")
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.text.replace(deployment.ids["token_id"], "X") == nobodys.text.replace(
        "0a1b2c3d4e5f", "X"
    )
