"""`log_metrics(..., framework=...)`: a framework's names land under ours, its own versions of a
metric stay apart, unknown names are kept, and the run's config says where the values came from.
Through the real `Run` with a recording transport (no network)."""

from __future__ import annotations

import importlib.util
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import collectors
from collectors._adapters import _provenance
from tests.collectors.test_transport import FakeTransport, make_run

# Names from verl's source: verl/workers/actor/dp_actor.py (actor/*), verl/trainer/ppo/
# metric_utils.py (critic/score/mean, response_length/mean, timing_s/*),
# verl/trainer/ppo/rollout_corr_helper.py (rollout_corr/*).
VERL_STEP = {
    "actor/grad_norm": 0.8,
    "actor/entropy": 0.61,
    "actor/pg_clipfrac": 0.02,
    "critic/score/mean": 0.35,
    "response_length/mean": 412.0,
    "rollout_corr/k3_kl": 4e-4,
    "timing_s/gen": 12.5,
}


def _config(transport: FakeTransport) -> dict[str, Any]:
    runs = [b["run"] for b in transport.batches if "run" in b]
    assert runs, "no run upsert was sent"
    config: dict[str, Any] = runs[-1]["config"]
    return config


def test_verl_names_land_under_ours_and_variants_stay_apart(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    assert run.log_metrics(7, VERL_STEP, framework="verl")
    assert run.flush(10)
    (record,) = transport.records()
    assert record["step"] == 7
    assert record["metrics"] == {
        "grad_norm": 0.8,
        "entropy": 0.61,
        "clip_rate@verl": 0.02,  # verl counts only binding clips: not our clip_rate
        "reward_mean": 0.35,
        "response_length_mean": 412.0,
        "k3_kl": 4e-4,
        "timing_s/gen": 12.5,  # ours has no such metric: kept under its own name
    }
    run.close()


def test_provenance_names_the_framework_and_its_installed_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verl is not installed here: point its distribution at one that is, to see a real lookup.
    monkeypatch.setitem(_provenance.DISTRIBUTIONS, "verl", "pytest")
    transport = FakeTransport()
    run = make_run(tmp_path, transport, config={"lr": 1e-6})
    run.log_metrics(1, VERL_STEP, framework="VERL")
    run.log_metrics(2, VERL_STEP, framework="verl")
    assert run.flush(10)
    config = _config(transport)
    assert config["framework"] == {"name": "verl", "version": metadata.version("pytest")}
    assert config["lr"] == 1e-6
    run.close()


def test_provenance_without_the_framework_installed_has_no_version(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    # OpenRLHF is not installed here (TRL is: the TRL recipe's test trains with it).
    assert importlib.util.find_spec("openrlhf") is None
    run.log_metrics(1, {"vllm_kl": 0.01}, framework="openrlhf")
    assert run.flush(10)
    assert _config(transport)["framework"] == {"name": "openrlhf", "version": None}
    assert transport.records()[0]["metrics"] == {"k1_kl": 0.01}
    run.close()


def test_unknown_framework_warns_once_and_logs_the_names_unmapped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    with caplog.at_level(logging.WARNING, logger="mismatch_monitor.collectors"):
        assert run.log_metrics(1, {"actor/grad_norm": 1.0}, framework="deepspeed-chat")
        assert run.log_metrics(2, {"actor/grad_norm": 2.0}, framework="deepspeed-chat")
    assert run.flush(10)
    warnings = [r.getMessage() for r in caplog.records if "deepspeed-chat" in r.getMessage()]
    assert len(warnings) == 1
    assert "verl" in warnings[0]  # the message lists the frameworks we know
    assert [r["metrics"] for r in transport.records()] == [
        {"actor/grad_norm": 1.0},
        {"actor/grad_norm": 2.0},
    ]
    assert "framework" not in _config(transport)
    run.close()


def test_log_step_maps_the_framework_metrics_beside_the_computed_ones(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    summary = run.log_step(
        3,
        [[-1.0, -0.5]],
        [[-1.1, -0.4]],
        metrics={"actor/grad_norm": 0.5, "rollout_corr/k3_kl": 99.0},
        framework="verl",
    )
    assert run.flush(10)
    (record,) = transport.records()
    assert record["metrics"]["grad_norm"] == 0.5
    # A name the collectors computed wins over the framework's copy of it; the loser is kept.
    assert record["metrics"]["k3_kl"] == pytest.approx(summary.metrics["k3_kl"])
    assert record["metrics"]["rollout_corr/k3_kl"] == 99.0
    run.close()


def test_every_framework_has_a_distribution_to_read_its_version_from() -> None:
    from collectors._adapters import FRAMEWORKS

    assert set(_provenance.DISTRIBUTIONS) == set(FRAMEWORKS)


def test_framework_logging_is_reachable_from_the_public_init(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = collectors.init(
        url="http://127.0.0.1:9", run_id="pub", spool_dir=tmp_path, transport=transport
    )
    run.log_metrics(0, {"train/reward": 0.5}, framework="trl")
    assert run.flush(10)
    assert transport.records()[0]["metrics"] == {"reward_mean": 0.5}
    run.close()
