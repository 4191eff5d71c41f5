"""Cost-aware fuzzing: sequences a hostile or unlucky client could send, with values at the data
contract's limits, and every read that follows them.

Each example writes a run whose steps, values and metric names are drawn at the contract's edges
(steps up to 2^53, ±1e308, NaN, ±Inf, 5e-324; k3 and the other mismatch signals), then reads it
every way a user can: runs list, series, overlay, trends, a backtest of the project's rules and of
the most expensive drafts the caps allow, the hardware comparison and its report; between
writes come hostile requests (a body nested past the limit, credentials sent twice), refused
with a 4xx and changing nothing. Nothing may answer 5xx — and since the app runs with a short
analysis deadline, work that does not stay bounded by what was stored answers 503 there and
fails the test like a crash, with no clock in the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.api.nesting import MAX_JSON_DEPTH
from server.app import create_app
from server.config import Settings
from server.domain import signals
from tests.budget import examples

ANALYSIS_DEADLINE_S = 5.0
"""Far above what these reads need on a handful of stored steps; unbounded work passes it."""

STEP = st.one_of(st.integers(0, 200), st.integers(0, 2**53), st.sampled_from([0, 2**53]))
VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1e308, -1e308, 5e-324, float("nan"), float("inf"), -float("inf")]),
    st.floats(1e-6, 10.0),
)
METRIC = st.sampled_from(
    [s.metric for s in signals.SIGNALS] + ["entropy", "grad_norm", "lag", "custom/metric"]
)
GPUS = st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "cpu"])
RECORD = st.fixed_dictionaries(
    {
        "step": STEP,
        "metrics": st.dictionaries(METRIC, VALUE, min_size=1, max_size=5),
        "gpu": GPUS,
        "source": st.sampled_from(["trainer", "rollout"]),
    }
)
EXPENSIVE_DRAFT = {
    "name": "widest spike",
    "kind": "spike",
    "metric": "k3_kl",
    "params": {"space": "log", "window": 1000, "min_history": 1, "refresh": 50, "z": 0.1},
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    db = Path(tmp_path_factory.mktemp("fuzz-sequences")) / "fuzz.duckdb"
    settings_ = Settings(
        db=str(db),
        dashboard=False,
        allowed_hosts=["testserver"],
        analysis_timeout_s=ANALYSIS_DEADLINE_S,
    )
    with TestClient(create_app(settings_)) as test_client:
        yield test_client


def _reads(run: str, project: str, metric: str) -> list[tuple[str, str, Any]]:
    """(method, path, body) of every read a user makes of a run after writing it."""
    q = f"project={project}"
    metric = quote(metric, safe="")
    return [
        ("GET", f"/api/v1/runs?{q}", None),
        ("GET", f"/api/v1/runs/{run}?{q}", None),
        ("GET", f"/api/v1/runs/{run}/metrics?{q}", None),
        ("GET", f"/api/v1/runs/{run}/series?metric={metric}&{q}", None),
        ("GET", f"/api/v1/series?runs={run}&metric={metric}&{q}", None),
        ("GET", f"/api/v1/trends?runs={run}&{q}", None),
        ("GET", f"/api/v1/alerts?{q}", None),
        ("POST", "/api/v1/rules/backtest", {"run": run, "project": project}),
        (
            "POST",
            "/api/v1/rules/backtest",
            {"run": run, "project": project, "rules": [EXPENSIVE_DRAFT] * 3},
        ),
        ("GET", f"/api/v1/hardware?metric={metric}&{q}", None),
        ("GET", f"/api/v1/hardware?{q}", None),
        ("GET", f"/api/v1/hardware/report?metric={metric}&{q}", None),
        ("GET", "/metrics", None),
    ]


@pytest.mark.slow
@given(records=st.lists(RECORD, min_size=1, max_size=12), name=st.integers(0, 10**6))
@settings(
    max_examples=examples(25),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_a_run_at_the_contracts_limits_reads_back_every_way_without_5xx(
    client: Any, records: list[dict[str, Any]], name: int
) -> None:
    run, project = f"edge-{name}", f"fuzz-{name % 7}"
    body = {
        "run": {"id": run, "project": project},
        "records": [{"run_id": run, "actor": "a0", **r} for r in records],
    }
    written = client.post(
        "/api/v1/ingest",
        content=json.dumps(body),  # NaN and ±Inf as JSON's NaN/Infinity tokens
        headers={"Content-Type": "application/json"},
    )
    assert written.status_code < 500, written.text
    metric = next(iter(records[0]["metrics"]))
    failures = []
    for method, path, payload in _reads(run, project, metric):
        response = client.request(method, path, json=payload)
        if response.status_code >= 500:
            failures.append(f"{method} {path}: {response.status_code} {response.text[:300]}")
    assert failures == []


@pytest.mark.slow
@given(
    records=st.lists(RECORD, min_size=1, max_size=6),
    name=st.integers(0, 10**6),
    depth=st.integers(MAX_JSON_DEPTH + 1, 100_000),
    where=st.sampled_from(["config", "metrics", "records", "whole"]),
    repeated=st.sampled_from(["Authorization", "authorization"]),
)
@settings(
    max_examples=examples(15),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_hostile_requests_between_writes_change_nothing(
    client: Any,
    records: list[dict[str, Any]],
    name: int,
    depth: int,
    where: str,
    repeated: str,
) -> None:
    """A run is written; then the same run again with a part nested past the limit, and a
    write and a read carrying their credentials twice: each is refused with a 4xx naming what
    was wrong, and the run reads back exactly as the first write left it."""
    run, project = f"hostile-{name}", f"fuzz-{name % 7}"
    body = {
        "run": {"id": run, "project": project},
        "records": [{"run_id": run, "actor": "a0", **r} for r in records],
    }
    json_headers = {"Content-Type": "application/json"}
    written = client.post("/api/v1/ingest", content=json.dumps(body), headers=json_headers)
    assert written.status_code < 500, written.text
    before = client.get(f"/api/v1/runs/{run}/metrics?project={project}")

    deep = "[" * depth + "1" + "]" * depth
    hostile = json.loads(json.dumps(body))
    hostile["run"]["config"] = {"x": "__deep__"}
    if where == "metrics":
        hostile["records"][0]["metrics"] = {"k3_kl": "__deep__"}
    elif where == "records":
        hostile["records"].append("__deep__")
    text = json.dumps(hostile).replace('"__deep__"', deep, 1)
    if where == "whole":
        text = "[" * depth + text + "]" * depth
    refused = client.post("/api/v1/ingest", content=text, headers=json_headers)
    assert refused.status_code == 422, refused.text[:300]
    assert str(MAX_JSON_DEPTH) in refused.json()["detail"]

    twice = [(repeated, "Bearer mm_aaaa_one"), (repeated, "Bearer mm_bbbb_two")]
    again = client.post(
        "/api/v1/ingest", content=json.dumps(body), headers=[*json_headers.items(), *twice]
    )
    assert again.status_code == 400 and "more than once" in again.json()["detail"]
    read = client.get(f"/api/v1/runs/{run}/metrics?project={project}", headers=twice)
    assert read.status_code == 400

    after = client.get(f"/api/v1/runs/{run}/metrics?project={project}")
    assert (after.status_code, after.json()) == (before.status_code, before.json())
