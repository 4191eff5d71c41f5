"""Mismatch attribution over HTTP on a real server: runs ingested with one failure mode's
fingerprint each come back attributed to it, with the checks behind it; a missing run, another
project's run and a reversed step range answer 4xx that say what to change."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from server.alarms.delivering.diagnosis import Diagnostician
from server.alarms.delivering.payloads import event, render
from server.auth import OPEN
from server.domain.alarms import Alert, Rule
from server.services.ingest import IngestService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork
from tests.dashboard.seed import engine, run_body
from tests.factories import bucket_table, ingest_batch, record, run_upsert

STEPS = 20


@pytest.fixture
def server(server_factory: Any, db_url: str) -> Any:
    return server_factory(db_url)


def _ingest(server: Any, body: dict[str, Any]) -> None:
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text


def _k3(seed: int, level: float) -> list[float]:
    rng = random.Random(seed)
    return [level * math.exp(0.3 * rng.gauss(0, 1)) for _ in range(STEPS)]


def _offset_run(run_id: str, project: str = "default") -> dict[str, Any]:
    """Raw logprobs: k1 ≈ −2·k3 from the first step."""
    config = {"engine": {"logprobs_mode": "raw_logprobs", "temperature": 0.7}}
    records = [
        record(run_id, s, {"k3_kl": v, "k1_kl": -2 * v}, buckets=[bucket_table([100.0] * 7)])
        for s, v in enumerate(_k3(1, 3e-3))
    ]
    return {"run": run_upsert(run_id, project=project, config=config), "records": records}


def _stale_run(run_id: str, *, on_records: bool = False) -> dict[str, Any]:
    """k3 jumps at each weight update and only there; the rollout side logs the versions as a
    metric, or (`on_records`) the trainer's records carry them."""
    values = _k3(2, 1e-4)
    records = []
    for s, v in enumerate(values):
        jump = 20.0 if s % 5 == 0 and s > 0 else 1.0
        metrics = {"k3_kl": v * jump, "k1_kl": v * jump}
        if on_records:
            records.append(record(run_id, s, metrics, weight_version=s // 5))
            continue
        records.append(record(run_id, s, metrics))
        rollout = {"weight_version": float(s // 5), "prefix_cache_hit_rate": 0.5}
        records.append(record(run_id, s, rollout, source="rollout", actor="vllm-0"))
    config = {"engine": {"enable_prefix_caching": True, "logprobs_mode": "processed_logprobs"}}
    return {"run": run_upsert(run_id, config=config), "records": records}


def test_offset_run_is_attributed_to_the_sampler_with_its_config_beside(server: Any) -> None:
    _ingest(server, _offset_run("raw"))
    found = server.query("/api/v1/runs/raw/attribution")
    assert found["signal"] == "k3_kl" and found["steps"] == STEPS
    assert found["top"]["mode"] == "sampler_offset"
    checks = {c["name"]: c for c in found["checks"]}
    assert checks["mean_offset"]["passed"] is True
    assert checks["mean_offset"]["figure"] == pytest.approx(3.0)
    assert checks["bucket_slope"]["passed"] is False  # bucket_table's k3 is flat per token
    notes = {n["key"]: n["effect"] for n in found["top"]["config"]}
    assert notes == {"engine.logprobs_mode": "raises", "engine.temperature": "raises"}
    assert [h["score"] for h in found["hypotheses"]] == sorted(
        (h["score"] for h in found["hypotheses"]), reverse=True
    )


def test_step_range_limits_what_is_read(server: Any) -> None:
    _ingest(server, _offset_run("raw"))
    found = server.query("/api/v1/runs/raw/attribution?step_min=5&step_max=14")
    assert (found["step_min"], found["step_max"], found["steps"]) == (5, 14, 10)


@pytest.mark.parametrize("on_records", [False, True], ids=["metric", "records"])
def test_update_aligned_jump_is_attributed_to_stale_state(server: Any, on_records: bool) -> None:
    _ingest(server, _stale_run("stale", on_records=on_records))
    found = server.query("/api/v1/runs/stale/attribution")
    assert found["top"]["mode"] == "stale_state"
    checks = {c["name"]: c for c in found["checks"]}
    assert checks["update_jump"]["passed"] is True
    assert checks["mean_offset"]["passed"] is False


def test_gpu_contrast_of_a_like_for_like_group_is_attributed_to_the_gpu(
    server_factory: Any,
) -> None:
    server = server_factory()
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    for run_id, gpu, k3 in (("a", "NVIDIA A100-SXM4-80GB", 5e-2), ("h", "NVIDIA H20", 1e-3)):
        body = run_body(run_id, run_id, config, gpu, steps=30, k3=lambda s, k=k3: k,
                        ratio_dev=lambda s: 0.0, clip=0.0, project="hw")  # fmt: skip
        _ingest(server, body)
    found = server.query("/api/v1/runs/a/attribution?project=hw")
    checks = {c["name"]: c for c in found["checks"]}
    assert checks["gpu_contrast"]["passed"] is True
    assert checks["gpu_contrast"]["figure"] == pytest.approx(50.0, rel=0.1)
    assert found["top"]["mode"] == "gpu_kernels"


def test_missing_or_unreadable_runs_and_bad_ranges_answer_4xx(server: Any) -> None:
    _ingest(server, _offset_run("raw", project="p1"))
    missing = server.get("/api/v1/runs/nope/attribution")
    assert missing.status_code == 404 and "no run 'nope'" in missing.text
    elsewhere = server.get("/api/v1/runs/raw/attribution?project=p2")
    assert elsewhere.status_code == 404
    reversed_range = server.get("/api/v1/runs/raw/attribution?step_min=9&step_max=3")
    assert reversed_range.status_code == 422 and "step_min" in reversed_range.text


def _diagnose(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch("diagnose", *args, timeout=120)


def test_cli_diagnose_prints_the_likeliest_cause_and_its_checks(server: Any) -> None:
    _ingest(server, _offset_run("raw"))
    text = _diagnose("raw", "--url", server.url, "--step-range", "2:")
    assert text.returncode == 0, text.stderr
    assert "likeliest: sampler_offset" in text.stdout
    assert "PASS mean_offset" in text.stdout and "steps 2:" in text.stdout
    as_json = _diagnose("raw", "--url", server.url, "--json", "--step-range", ":9")
    found = json.loads(as_json.stdout)
    assert (found["step_max"], found["steps"]) == (9, 10)
    bad = _diagnose("raw", "--url", server.url, "--step-range", "a:b")
    assert bad.returncode == 2 and "--step-range must be" in bad.stderr
    missing = _diagnose("nope", "--url", server.url)
    assert missing.returncode == 2 and "404" in missing.stderr


def test_a_run_without_a_signal_gets_no_cause_over_the_api_or_the_cli(server: Any) -> None:
    quiet = [record("quiet", s, {"entropy": 1.0, "reward_mean": 0.5}) for s in range(STEPS)]
    _ingest(server, {"run": run_upsert("quiet"), "records": quiet})
    found = server.query("/api/v1/runs/quiet/attribution")
    assert found["signal"] is None and "no mismatch signal" in found["missing"]
    assert all(h["score"] == 0 for h in found["hypotheses"])
    text = _diagnose("quiet", "--url", server.url)
    assert text.returncode == 0, text.stderr
    assert "no likely cause: This run logs no mismatch signal" in text.stdout
    assert "likeliest" not in text.stdout


def test_alert_diagnosis_carries_the_likely_cause_in_every_format(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "d.duckdb"))
    migrate.upgrade(db)
    ingest = IngestService(db)
    ingest.ingest(ingest_batch(_offset_run("raw", project="p")), OPEN)
    ingest.close()
    alert = Alert(
        id="al_1", rule_id="r_1", rule_name="vllm-kl high", project="p", run_id="raw",
        metric="k3_kl", source="trainer", actor="trainer-0", severity="warning",
        state="firing", step=STEPS - 1, value=0.2, threshold=0.05, started_at=1.7e9,
    )  # fmt: skip
    rule = Rule(id="r_1", project="p", name="vllm-kl high", kind="threshold", metric="k3_kl")
    found = Diagnostician(db, base_url="https://monitor.example").diagnose(alert, rule)
    db.dispose()
    assert found is not None
    assert found.likely_cause.startswith("Likely cause: raw instead of processed logprobs")
    payload = event(alert, "firing", "https://monitor.example", found)
    assert payload["diagnosis"]["likely_cause"] == found.likely_cause
    slack = render("slack", payload)
    assert isinstance(slack, dict) and found.likely_cause in slack["text"].splitlines()
    (am,) = render("alertmanager", payload)
    assert am["annotations"]["likely_cause"] == found.likely_cause
