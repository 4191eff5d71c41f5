"""The diagnosis of a mismatch alert: which settings differ from the reference run (parity-relevant
ones only, the likelier explanation first, GPU types from the records), what it says without a
reference, and how each receiver format carries it."""

from __future__ import annotations

from pathlib import Path

from server.alarms.delivering.diagnosis import Diagnostician, differences_from
from server.alarms.delivering.payloads import event, render
from server.auth import OPEN
from server.domain.alarms import Alert, ConfigDifference, Diagnosis, Rule
from server.domain.parity import PARITY_KEYS
from server.services.ingest import IngestService
from server.storage.db import Database
from server.storage.reading import references
from server.storage.schema import migrate
from tests.factories import ingest_batch

WHY = dict(PARITY_KEYS)
BASE = "https://monitor.example"


def test_only_parity_relevant_differences_in_parity_order() -> None:
    run = {"engine": {"version": "0.10", "logprobs_mode": "raw_logprobs"}, "lr": 1e-6, "seed": 1}
    ref = {"engine": {"version": "0.8", "logprobs_mode": "processed_logprobs"}, "lr": 1e-6}
    found = differences_from(run, ref, ["NVIDIA A100"], ["NVIDIA H20"])
    assert found == (
        ConfigDifference(
            "engine.logprobs_mode", "raw_logprobs", "processed_logprobs", WHY["logprobs_mode"]
        ),
        ConfigDifference("engine.version", "0.10", "0.8", WHY["version"]),
        ConfigDifference("gpu", "NVIDIA A100", "NVIDIA H20", WHY["gpu"]),
    )


def test_gpus_named_in_the_config_are_not_listed_twice() -> None:
    found = differences_from({"hw": {"gpu": "A100"}}, {"hw": {"gpu": "H20"}}, ["A100"], ["H20"])
    assert [d.key for d in found] == ["hw.gpu"]
    assert differences_from({}, {}, ["H20"], ["H20"]) == ()
    assert differences_from({}, {}, ["H20"], []) == ()  # the reference logged no GPU


def _alert(run: str, step: int, **changes: object) -> Alert:
    values: dict[str, object] = {
        "id": "al_1", "rule_id": "r_1", "rule_name": "vllm-kl spike", "project": "p",
        "run_id": run, "metric": "k3_kl", "source": "trainer", "actor": "t0",
        "severity": "warning", "state": "firing", "step": step, "value": 0.2,
        "threshold": 1e-2, "started_at": 1.7e9, **changes,
    }  # fmt: skip
    return Alert(**values)  # type: ignore[arg-type]


def _db(tmp_path: Path) -> Database:
    db = Database(str(tmp_path / "d.duckdb"))
    migrate.upgrade(db)
    ingest = IngestService(db)
    for run, mode in (("ref", "processed_logprobs"), ("cand", "raw_logprobs")):
        records = [
            {"run_id": run, "step": s, "source": "trainer", "actor": "t0", "weight_version": 7,
             "metrics": {"k3_kl": 1e-3, "lag": 2.0}}
            for s in range(5)
        ] + [
            {"run_id": run, "step": 3, "source": "rollout", "actor": "v0", "weight_version": 9,
             "metrics": {"lag": 5.0}}
        ]  # fmt: skip
        body = {"run": {"id": run, "project": "p", "config": {"logprobs_mode": mode}}}
        ingest.ingest(ingest_batch({**body, "records": records}), OPEN)
    ingest.close()
    return db


SPIKE = Rule(id="r_1", project="p", name="vllm-kl spike", kind="spike", metric="k3_kl")


def test_diagnosis_reads_reference_lag_weight_version_and_links_the_comparison(
    tmp_path: Path,
) -> None:
    db = _db(tmp_path)
    doctor = Diagnostician(db, base_url=BASE)
    without = doctor.diagnose(_alert("cand", 3), SPIKE)
    assert without is not None and without.reference_run is None and without.differences == ()
    assert "no reference run" in without.note and without.compare_url is None
    with db.write() as conn:
        references.put(conn, "p", "ref", 1.0)
    found = doctor.diagnose(_alert("cand", 3), SPIKE)
    assert found is not None and found.reference_run == "ref"
    assert [(d.key, d.value, d.reference) for d in found.differences] == [
        ("logprobs_mode", "raw_logprobs", "processed_logprobs")
    ]
    assert (found.lag, found.weight_version) == (2.0, 7)  # the alert's own actor's
    rollout = doctor.diagnose(_alert("cand", 3, source="rollout", actor="v0"), SPIKE)
    assert rollout is not None and (rollout.lag, rollout.weight_version) == (5.0, 9)
    assert found.compare_url == (
        f"{BASE}/compare?runs=ref%2Ccand&ref=ref&metric=k3_kl&step_min=0&step_max=53"
    )
    own = doctor.diagnose(_alert("ref", 3), SPIKE)
    assert own is not None and "is the reference run" in own.note
    other = Rule(id="r_2", project="p", name="grad", kind="threshold", metric="grad_norm")
    assert doctor.diagnose(_alert("cand", 3, metric="grad_norm"), other) is None
    db.dispose()


DIAGNOSIS = Diagnosis(
    "v0",
    (
        ConfigDifference(
            "engine.logprobs_mode", "raw_logprobs", "processed_logprobs", "raw: offset"
        ),
    ),
    lag=2.0,
    weight_version=41,
    compare_url=f"{BASE}/compare?runs=v0,v1&ref=v0",
)


def test_every_receiver_format_carries_the_diagnosis() -> None:
    payload = event(_alert("v1", 250), "firing", BASE, DIAGNOSIS)
    assert render("standard", payload)["diagnosis"] == {  # type: ignore[call-overload]
        "reference_run": "v0",
        "differences": [
            {"key": "engine.logprobs_mode", "value": "raw_logprobs",
             "reference": "processed_logprobs", "why": "raw: offset"}
        ],
        "lag": 2.0, "weight_version": 41, "compare_url": DIAGNOSIS.compare_url, "note": "",
    }  # fmt: skip
    slack = render("slack", payload)
    assert isinstance(slack, dict)
    lines = slack["text"].splitlines()
    assert "• engine.logprobs_mode raw_logprobs ≠ processed_logprobs — raw: offset" in lines
    assert "At the step: lag 2.0, weight version 41" in lines
    assert f"<{DIAGNOSIS.compare_url}|compare with v0 around the step>" in lines
    (am,) = render("alertmanager", payload)
    assert am["annotations"]["diagnosis"] == (
        "engine.logprobs_mode raw_logprobs ≠ processed_logprobs — raw: offset"
    )
    assert am["annotations"]["weight_version"] == "41"
    assert all(isinstance(v, str) for v in am["annotations"].values())
    plain = event(_alert("v1", 250), "firing", BASE)
    assert plain["diagnosis"] is None and "Differs" not in render("slack", plain)["text"]  # type: ignore[call-overload]
