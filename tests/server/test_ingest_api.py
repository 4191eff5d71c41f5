"""Ingest → query round trips through a real uvicorn, on DuckDB and on PostgreSQL."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests import web
from tests.factories import batch, bucket_table, record, run_upsert


@pytest.fixture
def server(server_factory: Any, db_url: str) -> Any:
    return server_factory(db_url)


def _series(server: Any, run_id: str, metric: str, **params: Any) -> dict[str, Any]:
    query = "&".join(f"{k}={v}" for k, v in {"metric": metric, **params}.items())
    return server.query(f"/api/v1/runs/{run_id}/series?{query}")


def test_round_trip_keeps_nan_and_inf(server: Any) -> None:
    body = {
        "run": run_upsert("r1", project="p", name="collapse", labels={"gpu": "H20"}),
        "records": [
            record("r1", 0, {"k3_kl": 1e-3, "grad_norm": "nan"}),
            record("r1", 1, {"k3_kl": "inf", "grad_norm": 2.0}),
            record("r1", 2, {"k3_kl": "-inf", "grad_norm": 3.0}),
        ],
    }
    # NaN/Infinity as JSON tokens too (Python's json writes them).
    body["records"].append(record("r1", 3, {"k3_kl": float("nan"), "grad_norm": float("inf")}))
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert {k: v for k, v in answer.items() if k != "alerts"} == {
        "accepted": 4,
        "duplicates": 0,
        "annotations": 0,
    }
    # the answer counts the alerts the batch opened (NaN and ±Inf are data the rules read)
    assert answer["alerts"] == server.query("/api/v1/alerts?run=r1")["count"] > 0

    k3 = _series(server, "r1", "k3_kl")
    lasts = [p["last"] for p in k3["points"]]
    assert lasts[0] == pytest.approx(1e-3)
    assert lasts[1] == math.inf and lasts[2] == -math.inf and math.isnan(lasts[3])
    assert [(p["nan"], p["pos_inf"], p["neg_inf"]) for p in k3["points"]] == [
        (0, 0, 0),
        (0, 1, 0),
        (0, 0, 1),
        (1, 0, 0),
    ]
    grad = _series(server, "r1", "grad_norm")
    assert math.isnan(grad["points"][0]["last"]) and grad["points"][3]["last"] == math.inf

    run = server.query("/api/v1/runs/r1")
    assert run["name"] == "collapse" and run["project"] == "p"
    assert run["labels"] == {"gpu": "H20"} and run["last_step"] == 3
    assert run["actors"][0]["steps"] == 4


def test_resent_batch_adds_nothing(server: Any) -> None:
    body = batch("r2", range(50), metrics=5)
    first = server.post("/api/v1/ingest", body).json()
    again = server.post("/api/v1/ingest", body).json()
    assert first == {"accepted": 50, "duplicates": 0, "annotations": 0, "alerts": 0}
    assert again == {"accepted": 0, "duplicates": 50, "annotations": 0, "alerts": 0}
    series = _series(server, "r2", "m4", max_points=1000)
    assert series["total_points"] == 50
    assert all(p["count"] == 1 for p in series["points"])


def test_second_record_for_a_step_adds_only_new_metrics(server: Any) -> None:
    server.post(
        "/api/v1/ingest", {"run": run_upsert("r3"), "records": [record("r3", 7, {"k3_kl": 0.1})]}
    )
    response = server.post(
        "/api/v1/ingest", {"records": [record("r3", 7, {"k3_kl": 99.0, "reward_mean": 0.5})]}
    )
    assert response.json()["accepted"] == 1
    assert _series(server, "r3", "k3_kl")["points"][0]["last"] == pytest.approx(0.1)
    assert _series(server, "r3", "reward_mean")["points"][0]["last"] == pytest.approx(0.5)


def test_batch_with_one_invalid_record_stores_nothing(server: Any) -> None:
    body = batch("r4", range(10))
    body["records"][7]["step"] = -5
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 422
    assert "records.7.step" in response.json()["detail"]
    assert server.get("/api/v1/runs/r4").status_code == 404
    runs = server.query("/api/v1/runs")
    assert runs == {"data": [], "count": 0, "total": 0, "next_cursor": None}


def test_unknown_run_without_upsert_is_404_with_a_hint(server: Any) -> None:
    response = server.post("/api/v1/ingest", {"records": [record("ghost", 1, {"k3_kl": 1.0})]})
    assert response.status_code == 404
    assert "send a `run` object" in response.json()["detail"]


def test_gzip_body_is_accepted(server: Any) -> None:
    response = server.post("/api/v1/ingest", batch("r5", range(20)), gzip_body=True)
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 20


@pytest.mark.parametrize(
    ("payload", "status", "fragment"),
    [
        (b"{not json", 422, "JSON"),
        (b"[]", 422, "body"),
        (json.dumps({"records": [{"run_id": "x", "step": 1}]}).encode(), 422, "records.0.source"),
        (json.dumps({"records": [], "surprise": 1}).encode(), 422, "surprise"),
        (json.dumps({"run": {"id": "bad id!"}}).encode(), 422, "run.id"),
        (
            json.dumps({"records": [record("x", 1, {"k": "abc"})]}).encode(),
            422,
            "records.0.metrics.k",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(
    server: Any, payload: bytes, status: int, fragment: str
) -> None:
    response = web.post(
        server.url + "/api/v1/ingest", content=payload, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    assert fragment in json.dumps(response.json())


def test_body_over_limit_is_413(server_factory: Any, tmp_path: Path) -> None:
    server = server_factory(tmp_path / "small.duckdb", args=["--max-body-bytes", "4096"])
    response = server.post("/api/v1/ingest", batch("big", range(200)))
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    bomb = server.post("/api/v1/ingest", batch("big", range(2000)), gzip_body=True)
    assert bomb.status_code == 413


def test_buckets_round_trip_and_add_up(server: Any) -> None:
    records = []
    for step in range(4):
        for actor, gpu in (("a0", "NVIDIA H20"), ("a1", "NVIDIA A100")):
            rec = record("b1", step, {"k3_kl": 1e-3}, source="rollout", actor=actor, gpu=gpu)
            rec["buckets"] = [bucket_table([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0])]
            records.append(rec)
    assert (
        server.post("/api/v1/ingest", {"run": run_upsert("b1"), "records": records}).status_code
        == 200
    )
    total = server.query("/api/v1/runs/b1/buckets")["data"]
    assert len(total) == 7
    assert [row["tokens"] for row in total] == [80.0, 160.0, 240.0, 320.0, 400.0, 480.0, 560.0]
    assert total[0]["steps"] == 8 and total[0]["actors"] == 2  # 4 steps of 2 actors
    by_gpu = server.query("/api/v1/runs/b1/buckets?group_by=gpu&step_min=1&step_max=2")["data"]
    assert {row["group"] for row in by_gpu} == {"NVIDIA H20", "NVIDIA A100"}
    assert sum(row["tokens"] for row in by_gpu if row["lo"] == 0.0) == 40.0
    assert {row["steps"] for row in by_gpu} == {2}
    # A re-sent bucket table adds nothing.
    server.post("/api/v1/ingest", {"records": records})
    assert server.query("/api/v1/runs/b1/buckets")["data"][0]["tokens"] == 80.0


def test_annotations_are_stored_once(server: Any) -> None:
    note = {"id": "n1", "run_id": "a1", "step": 3, "kind": "warning", "text": "raw logprobs"}
    body = {"run": run_upsert("a1"), "annotations": [note]}
    assert server.post("/api/v1/ingest", body).json()["annotations"] == 1
    assert server.post("/api/v1/ingest", body).json()["annotations"] == 0
    run = server.query("/api/v1/runs/a1")
    assert [(a["kind"], a["text"], a["step"]) for a in run["annotations"]] == [
        ("warning", "raw logprobs", 3)
    ]


def test_run_config_merges_by_top_level_key(server: Any) -> None:
    server.post("/api/v1/ingest", {"run": {"id": "c1", "config": {"trainer": {"lr": 1e-6}}}})
    server.post(
        "/api/v1/ingest",
        {"run": {"id": "c1", "config": {"engine": {"logprobs_mode": "raw_logprobs"}}}},
    )
    config = server.query("/api/v1/runs/c1")["config"]
    assert config == {"trainer": {"lr": 1e-6}, "engine": {"logprobs_mode": "raw_logprobs"}}


def test_run_ids_are_per_project(server: Any) -> None:
    """The same id in another project is another run; where the caller sees both, a read
    without `project` asks which, and a batch without one is refused rather than guessed."""
    first = batch("c1", range(3))
    first["run"]["config"] = {"trainer": {"lr": 1e-6}}
    assert server.post("/api/v1/ingest", first).status_code == 200
    other = batch("c1", range(5, 7), project="elsewhere")
    assert server.post("/api/v1/ingest", other).status_code == 200
    ambiguous = server.get("/api/v1/runs/c1")
    assert ambiguous.status_code == 409
    assert "default" in ambiguous.json()["detail"] and "elsewhere" in ambiguous.json()["detail"]
    assert server.query("/api/v1/runs/c1?project=default")["config"] == {"trainer": {"lr": 1e-6}}
    elsewhere = server.query("/api/v1/runs/c1?project=elsewhere")
    assert elsewhere["config"] == {} and elsewhere["last_step"] == 6
    series = server.query("/api/v1/runs/c1/series?metric=k3_kl&project=default")
    assert [p["step"] for p in series["points"]] == [0, 1, 2]
    unnamed = server.post("/api/v1/ingest", batch("c1", range(10, 12), with_run=False))
    assert unnamed.status_code == 409 and "project" in unnamed.json()["detail"]
    assert server.query("/api/v1/runs?text=c1")["count"] == 2


def test_run_list_filters(server: Any) -> None:
    server.post(
        "/api/v1/ingest",
        {"run": run_upsert("f1", project="p1", labels={"engine": "v0"}, tags=["ref"])},
    )
    server.post(
        "/api/v1/ingest",
        {"run": run_upsert("f2", project="p2", name="V1 after fixes", labels={"engine": "v1"})},
    )
    ids = lambda q: [r["id"] for r in server.query("/api/v1/runs" + q)["data"]]  # noqa: E731
    assert sorted(ids("")) == ["f1", "f2"]
    assert ids("?project=p1") == ["f1"]
    assert ids("?label=engine=v1") == ["f2"]
    assert sorted(ids("?label=engine")) == ["f1", "f2"]
    assert ids("?tag=ref") == ["f1"]
    assert ids("?text=after") == ["f2"]
    assert server.query("/api/v1/projects")["data"] == ["p1", "p2"]


def test_overlays_and_run_pages_read_through_one_endpoint(server: Any) -> None:
    for run_id in ("o1", "o2"):
        records = [
            record(run_id, s, {"k3_kl": 1e-3 * (s + 1), "grad_norm": 2.0}) for s in range(30)
        ]
        body = {"run": run_upsert(run_id), "records": records}
        assert server.post("/api/v1/ingest", body).status_code == 200
    overlay = server.query("/api/v1/series?runs=o2,o1&metric=k3_kl&max_points=10")
    assert [(s["run_id"], s["metric"]) for s in overlay["data"]] == [
        ("o2", "k3_kl"),
        ("o1", "k3_kl"),
    ]
    panels = server.query("/api/v1/series?runs=o1&metrics=k3_kl,grad_norm,absent&max_points=10")
    assert [(s["metric"], s["total_points"]) for s in panels["data"]] == [
        ("k3_kl", 30),
        ("grad_norm", 30),
        ("absent", 0),
    ]
    single = _series(server, "o1", "k3_kl", max_points=10)
    assert panels["data"][0] == single
    for query, message in (
        ("runs=o1&metric=k3_kl&metrics=a", "either `metric`"),
        ("runs=o1", "either `metric`"),
        ("runs=o1&metrics=,,", "comma-separated list of metric names"),
        ("runs=o1,zz&metric=k3_kl", "no run 'zz'"),
    ):
        response = server.get(f"/api/v1/series?{query}")
        assert 400 <= response.status_code < 500 and message in response.text, (
            query,
            response.text,
        )
