"""Token exemplars and parity reports through a real uvicorn: what is posted comes back (NaN
kept), ranked by |d|, idempotently; parity reports are runs of their own kind; bad queries
get a 4xx that says what to change."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.factories import parity_report, record, run_upsert


@pytest.fixture
def server(server_factory: Any, db_url: str) -> Any:
    return server_factory(db_url)


def _exemplar(kind: str, seq: int, pos: int, lr: Any, lt: Any, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "seq": seq,
        "pos": pos,
        "rollout_logprob": lr,
        "trainer_logprob": lt,
        **extra,
    }


def _key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["kind"], e["seq"], e["pos"])


def test_parity_report_exemplars_round_trip_ranked_by_abs_log_ratio(server: Any) -> None:
    body = parity_report("par-a", top=32, uniform=32)
    sent = body["records"][0]["exemplars"]
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text

    got = server.query("/api/v1/runs/par-a/exemplars?limit=5000")
    assert got["count"] == len({_key(e) for e in sent})
    by_key = {_key(e): e for e in got["data"]}
    for e in sent:
        stored = by_key[_key(e)]
        assert stored["rollout_logprob"] == e["rollout_logprob"]
        assert stored["trainer_logprob"] == e["trainer_logprob"]
        assert (stored["token"], stored["context"], stored["token_id"]) == (
            e["token"],
            e["context"],
            e["token_id"],
        )
        assert (stored["step"], stored["source"], stored["actor"]) == (0, "trainer", "parity")
    gaps = [abs(e["trainer_logprob"] - e["rollout_logprob"]) for e in got["data"]]
    assert gaps == sorted(gaps, reverse=True)
    worst = max(sent, key=lambda e: abs(e["trainer_logprob"] - e["rollout_logprob"]))
    assert _key(got["data"][0]) == _key(worst)

    tops = server.query("/api/v1/runs/par-a/exemplars?kind=uniform&limit=3")
    assert tops["count"] == 3 and {e["kind"] for e in tops["data"]} == {"uniform"}


def test_nonfinite_exemplars_are_kept_and_ranked_first(server: Any) -> None:
    body = {
        "run": run_upsert("r1"),
        "records": [
            record(
                "r1",
                3,
                {"k3_kl": 1e-3},
                exemplars=[
                    _exemplar("top", 0, 1, -0.1, -0.2),
                    _exemplar("top", 0, 2, -3.0, "nan"),
                    _exemplar("top", 1, 0, "-inf", -5.0),
                    _exemplar("uniform", 2, 7, -0.01, -0.01),
                ],
            )
        ],
    }
    assert server.post("/api/v1/ingest", body).status_code == 200
    data = server.query("/api/v1/runs/r1/exemplars")["data"]
    assert [(e["seq"], e["pos"]) for e in data] == [(0, 2), (1, 0), (0, 1), (2, 7)]
    assert math.isnan(data[0]["trainer_logprob"]) and data[1]["rollout_logprob"] == -math.inf
    assert data[0]["token"] is None and data[0]["context"] is None


def test_resent_exemplars_change_nothing_and_new_ones_count(server: Any) -> None:
    first = [_exemplar("top", 0, i, -1.0 - i, -1.1 - i) for i in range(3)]
    body = {"run": run_upsert("r1"), "records": [record("r1", 0, {"k3_kl": 1e-3}, exemplars=first)]}
    assert server.post("/api/v1/ingest", body).json()["accepted"] == 1
    again = server.post("/api/v1/ingest", body).json()
    assert again == {"accepted": 0, "duplicates": 1, "annotations": 0, "alerts": 0}
    assert server.query("/api/v1/runs/r1/exemplars")["count"] == 3

    changed = [_exemplar("top", 0, 0, -9.0, -9.0)]  # a stored key: the first value stays
    more = [*changed, _exemplar("uniform", 0, 0, -2.0, -2.5)]
    body["records"] = [record("r1", 0, {"k3_kl": 1e-3}, exemplars=more)]
    assert server.post("/api/v1/ingest", body).json()["accepted"] == 1
    data = server.query("/api/v1/runs/r1/exemplars")["data"]
    assert len(data) == 4
    stored = {_key(e): e["rollout_logprob"] for e in data}
    assert stored[("top", 0, 0)] == -1.0


def test_exemplars_filter_by_step_range(server: Any) -> None:
    records = [
        record("r1", s, {"k3_kl": 1e-3}, exemplars=[_exemplar("top", 0, 0, -1.0, -1.0 - s)])
        for s in range(6)
    ]
    assert server.post("/api/v1/ingest", {"run": run_upsert("r1"), "records": records}).is_success
    data = server.query("/api/v1/runs/r1/exemplars?step_min=2&step_max=4")["data"]
    assert [e["step"] for e in data] == [4, 3, 2]


def test_parity_reports_are_a_kind_of_run(server: Any) -> None:
    assert server.post("/api/v1/ingest", parity_report("par-a", tokens=256)).is_success
    assert server.post("/api/v1/ingest", {"run": run_upsert("train-1")}).is_success
    everything = server.query("/api/v1/runs")["data"]
    assert {r["id"]: r["kind"] for r in everything} == {"par-a": "parity", "train-1": "training"}
    parity = server.query("/api/v1/runs?kind=parity")
    assert [r["id"] for r in parity["data"]] == ["par-a"] and parity["total"] == 1
    training = server.query("/api/v1/runs?kind=training")["data"]
    assert [r["id"] for r in training] == ["train-1"]
    detail = server.query("/api/v1/runs/par-a")
    assert detail["kind"] == "parity"
    assert detail["config"]["engine"]["logprobs_mode"] == "processed_logprobs"
    assert [a["kind"] for a in detail["annotations"]] == ["parity_phase"]


@pytest.mark.parametrize(
    ("exemplar", "needle"),
    [
        (_exemplar("worst", 0, 0, -1.0, -1.0), "kind"),
        (_exemplar("top", -1, 0, -1.0, -1.0), "seq"),
        (_exemplar("top", 0, 0, -1.0, -1.0, token="x" * 101), "token"),
        (_exemplar("top", 0, 0, -1.0, -1.0, context="x" * 401), "context"),
        (_exemplar("top", 0, 0, -1.0, -1.0, token_id=-3), "token_id"),
        (_exemplar("top", 0, 0, -1.0, -1.0, logprob=-1.0), "logprob"),
        ({"kind": "top", "seq": 0, "pos": 0, "rollout_logprob": -1.0}, "trainer_logprob"),
    ],
)
def test_invalid_exemplars_are_refused_with_the_field_named(
    server: Any, exemplar: dict[str, Any], needle: str
) -> None:
    body = {"run": run_upsert("r1"), "records": [record("r1", 0, {}, exemplars=[exemplar])]}
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 422, response.text
    assert needle in response.text


def test_too_many_exemplars_in_one_record_are_refused(server: Any) -> None:
    many = [_exemplar("top", 0, i, -1.0, -1.0) for i in range(1025)]
    body = {"run": run_upsert("r1"), "records": [record("r1", 0, {}, exemplars=many)]}
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 422 and "1024" in response.text
    assert server.get("/api/v1/runs/r1").status_code == 404  # all or nothing


@pytest.mark.parametrize(
    ("query", "status", "needle"),
    [
        ("step_min=5&step_max=2", 422, "step_min"),
        ("kind=worst", 422, "kind"),
        ("limit=0", 422, "limit"),
        ("step_min=-1", 422, "step_min"),
    ],
)
def test_bad_exemplar_queries_say_what_to_change(
    server: Any, query: str, status: int, needle: str
) -> None:
    assert server.post("/api/v1/ingest", {"run": run_upsert("r1")}).is_success
    response = server.get(f"/api/v1/runs/r1/exemplars?{query}")
    assert response.status_code == status, response.text
    assert needle in response.text


def test_exemplars_of_an_unknown_run_are_404_and_a_bad_kind_filter_422(server: Any) -> None:
    response = server.get("/api/v1/runs/nope/exemplars")
    assert response.status_code == 404 and "GET /api/v1/runs" in response.text
    response = server.get("/api/v1/runs?kind=inference")
    assert response.status_code == 422 and "kind" in response.text
