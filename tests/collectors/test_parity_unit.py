"""The pure parts of a parity check — prompt files, the gate, what the CLI prints, the report's
JSON, the trainer's sampling distribution — without an engine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors._parity import (
    BUILTIN_PROMPTS,
    ParityReport,
    Phase,
    PromptFileError,
    evaluate,
    load_prompts,
)
from collectors._parity._trainer import sampler_log_probs
from server.cli.parity_output import explain, settings


def test_prompt_file_takes_strings_and_prompt_objects(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('"plain"\n\n{"prompt": "object", "id": 3}\n')
    assert load_prompts(path) == ["plain", "object"]


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('"ok"\n{"prompt": \n', 2, "not valid JSON"),
        ('"ok"\n"ok"\n{"text": "x"}\n', 3, '"prompt"'),
        ("42\n", 1, "JSON string"),
    ],
)
def test_a_bad_prompt_line_is_named_by_file_and_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(PromptFileError, match=f"bad.jsonl:{line}: .*{says}"):
        load_prompts(path)


def test_an_empty_prompt_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(path)


def test_builtin_prompts_share_a_prefix_longer_than_a_cache_block() -> None:
    long = [p for p in BUILTIN_PROMPTS if len(p.split()) > 128]
    assert len(long) >= 2
    shared = 0
    for a, b in zip(long[0].split(), long[1].split(), strict=False):
        if a != b:
            break
        shared += 1
    assert shared > 128


def report(k3: float, dev: float, **engine: object) -> ParityReport:
    config: dict[str, object] = {
        "name": "vllm",
        "version": "0.32.0",
        "logprobs_mode": "processed_logprobs",
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "enable_prefix_caching": False,
        "head_dtype": "float32",
        "dtype": "float32",
        "gpu": "cpu",
    }
    config.update(engine)
    metrics = {"k3_kl": k3, "ratio_dev_1e4": dev, "tokens": 10.0}
    ex = {"kind": "top", "seq": 0, "pos": 1, "rollout_logprob": -1.0, "trainer_logprob": math.nan}
    table = {"basis": "rollout", "edges": [0.0, 0.5, 1.0], "tokens": [1.0, 9.0]}
    table["sum_d"] = [-math.inf, 0.0]
    phase = Phase(0, "plain sampling", metrics, [table], [ex])
    return ParityReport(
        (phase,), config, {"dtype": "float32"}, {"prompts": 8, "weight_update": "none"}
    )


def test_gate_passes_within_both_limits_and_fails_past_either() -> None:
    assert evaluate(report(1e-12, 0.0)).passed
    failed = evaluate(report(2e-3, 0.0))
    assert not failed.passed
    assert [(x.metric, x.value) for x in failed.exceeded] == [("k3_kl", 2e-3)]
    assert [x.metric for x in evaluate(report(0.0, -150.0)).exceeded] == ["ratio_dev_1e4"]
    assert evaluate(report(1.0, 0.0), max_k3=2.0).passed


def test_gate_fails_on_nan() -> None:
    assert [x.metric for x in evaluate(report(math.nan, 0.0)).exceeded] == ["k3_kl"]


def test_failure_names_raw_logprobs_first_when_sampling_is_not_plain() -> None:
    bad = report(0.3, 8000.0, logprobs_mode="raw_logprobs", temperature=0.7)
    gate = evaluate(bad)
    rows = settings(bad, gate)
    assert rows[0][0] == "engine.logprobs_mode"
    assert "temperature=0.7" in rows[0][2]
    lines = explain(bad, gate)
    flagged = [line for line in lines if line.strip().startswith("!")]
    assert flagged and "engine.logprobs_mode = raw_logprobs" in flagged[0]
    assert lines.index(flagged[0]) < min(
        i for i, line in enumerate(lines) if "engine.temperature" in line
    )


def test_raw_logprobs_at_plain_temperature_is_not_flagged() -> None:
    plain = report(0.0, 0.0, logprobs_mode="raw_logprobs")
    assert evaluate(plain).suspicious == {}


def test_bf16_head_and_kept_prefix_cache_are_flagged() -> None:
    r = report(0.04, 0.0, head_dtype="bfloat16", enable_prefix_caching=True)
    r.parity.update(weight_update="perturbed", reset_prefix_cache=False)
    assert set(evaluate(r).suspicious) == {"engine.head_dtype", "engine.enable_prefix_caching"}


def test_report_json_is_strict_and_carries_the_wire_shapes() -> None:
    r = report(math.inf, 0.0)
    out = json.loads(json.dumps(r.to_json(), allow_nan=False))
    assert set(out) == {"config", "labels", "phases", "self_check"}
    assert set(out["config"]) == {"engine", "trainer", "parity"}
    assert out["labels"]["vllm"] == "0.32.0"
    assert out["labels"]["logprobs_mode"] == "processed_logprobs"
    phase = out["phases"][0]
    assert (phase["step"], phase["metrics"]["k3_kl"]) == (0, "inf")
    assert phase["exemplars"][0]["trainer_logprob"] == "nan"
    assert phase["buckets"][0]["sum_d"] == ["-inf", 0.0]
    assert phase["buckets"][0]["edges"] == [0.0, 0.5, 1.0]
    gate = json.loads(json.dumps(evaluate(r).to_json(), allow_nan=False))
    assert gate["passed"] is False and gate["exceeded"][0]["value"] == "inf"


def reference_sampler(logits: np.ndarray, t: float, top_p: float, top_k: int) -> np.ndarray:
    """float64, one row at a time: keep the top_k largest, then the smallest set of most likely
    tokens whose mass reaches top_p (the least likely dropped while the dropped mass stays
    within 1 − top_p), renormalise."""
    out = np.empty_like(logits, dtype=np.float64)
    for r, row in enumerate(logits.astype(np.float64) / t):
        keep = np.ones(row.shape, bool)
        if top_k:
            keep[np.argsort(-row)[top_k:]] = False
        p = np.where(keep, np.exp(row - row[keep].max()), 0.0)
        p /= p.sum()
        dropped = 0.0
        for i in np.argsort(p):
            if not keep[i]:
                continue
            if dropped + p[i] > 1 - top_p or keep.sum() == 1:
                break
            dropped += p[i]
            keep[i] = False
        z = np.log(np.exp(row[keep] - row[keep].max()).sum()) + row[keep].max()
        out[r] = np.where(keep, row - z, -np.inf)
    return out


@pytest.mark.parametrize(("t", "top_p", "top_k"), [(0.7, 0.9, 0), (1.0, 1.0, 5), (0.5, 0.8, 20)])
def test_trainer_distribution_matches_an_independent_top_p_top_k(
    t: float, top_p: float, top_k: int
) -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1)) * 3
    found = sampler_log_probs(logits, t, top_p, top_k).double().numpy()
    expected = reference_sampler(logits.numpy(), t, top_p, top_k)
    assert np.array_equal(np.isinf(found), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(found[finite], expected[finite], atol=1e-5)
