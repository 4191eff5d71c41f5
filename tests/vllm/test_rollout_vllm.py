"""The rollout collector on a real vLLM engine: the seed's semantic mismatch reproduced."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import collectors
from collectors import RolloutCollector, compute_step_metrics
from tests.vllm.conftest import trainer_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = ["the policy reward", "one two three", "engine trainer rollout", "cache prefix batch"]
TEMPERATURE = 0.7


class Recorder:
    """A stand-in for the run handle that keeps what the collector sends."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []
        self.records: list[tuple[int, dict[str, float], dict[str, Any]]] = []
        self.notes: list[str] = []

    def update_config(self, config: Any) -> bool:
        self.configs.append(dict(config))
        return True

    def log_metrics(self, step: int, metrics: Any, **kwargs: Any) -> bool:
        self.records.append((step, dict(metrics), kwargs))
        return True

    def annotate(self, text: str, step: int | None = None, **kwargs: Any) -> bool:
        self.notes.append(text)
        return True


def sample(llm: Any, collector: RolloutCollector, *, top_p: float = 1.0, step: int = 0) -> Any:
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=TEMPERATURE, top_p=top_p, max_tokens=24, logprobs=0, n=2, seed=7
    )
    with collector.timed():
        outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    return collector.observe(outputs, step=step, weight_version=0, sampling_params=params)


def mismatch(tiny_model: Path, batch: Any) -> dict[str, float]:
    trainer = trainer_logprobs(tiny_model, batch.prompt_token_ids, batch.token_ids, TEMPERATURE)
    rollout, mask = batch.padded()
    padded = np.zeros_like(rollout)
    for i, row in enumerate(trainer):
        padded[i, : len(row)] = row
    return compute_step_metrics(rollout, padded, mask).metrics


def test_processed_logprobs_match_the_trainer_and_raw_ones_do_not(
    tiny_model: Path, make_engine: Any
) -> None:
    results = {}
    for mode in ("processed_logprobs", "raw_logprobs"):
        llm = make_engine(logprobs_mode=mode)
        run = Recorder()
        collector = RolloutCollector(run, llm, actor="rollout-0")
        batch = sample(llm, collector)
        results[mode] = (mismatch(tiny_model, batch), run, collector)
    processed, raw = results["processed_logprobs"][0], results["raw_logprobs"][0]
    assert processed["k3_kl"] < 1e-6
    assert abs(processed["ratio_dev_1e4"]) < 1.0
    assert raw["k3_kl"] > 10 * max(processed["k3_kl"], 1e-9)
    assert raw["k3_kl"] > 1e-3
    assert abs(raw["ratio_dev_1e4"]) > 50

    raw_run = results["raw_logprobs"][1]
    assert any("raw_logprobs" in n and "temperature=0.7" in n for n in raw_run.notes)
    assert not any("raw_logprobs" in n for n in results["processed_logprobs"][1].notes)
    engine = raw_run.configs[-1]["engine"]
    assert engine["logprobs_mode"] == "raw_logprobs"
    assert engine["enforce_eager"] is True
    (_, metrics, kwargs), *_ = raw_run.records
    assert kwargs["source"] == "rollout"
    assert metrics["rollout_sequences"] == 2 * len(PROMPTS)
    assert metrics["rollout_tokens"] > 0
    assert "generation_tokens_per_s" in metrics
    print(
        {
            "processed_k3": processed["k3_kl"],
            "raw_k3": raw["k3_kl"],
            "raw_ratio_dev_1e4": raw["ratio_dev_1e4"],
        }
    )


def test_top_p_renormalisation_offset_is_named(tiny_model: Path, make_engine: Any) -> None:
    llm = make_engine(logprobs_mode="processed_logprobs")
    run = Recorder()
    collector = RolloutCollector(run, llm)
    batch = sample(llm, collector, top_p=0.9)
    got = mismatch(tiny_model, batch)
    # Against a temperature-only trainer every kept token is off by -log(kept mass) <= -log(0.9).
    assert got["k1_kl"] > 0.5 * -math.log(0.9)
    assert got["k1_kl"] < 4 * -math.log(0.9)
    assert any("top_p=0.9" in n and "renormalised" in n for n in run.notes)


def test_through_a_real_server_with_effective_config(
    tiny_model: Path, make_engine: Any, server_factory: Any, tmp_path: Path
) -> None:
    llm = make_engine(logprobs_mode="raw_logprobs", async_scheduling=True)
    server = server_factory()
    run = collectors.init(
        url=server.url,
        run_id="vllm-raw",
        project="parity",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
    )
    collector = RolloutCollector(run, llm, actor="rollout-0")
    batch = sample(llm, collector, step=1)
    trainer = trainer_logprobs(tiny_model, batch.prompt_token_ids, batch.token_ids, TEMPERATURE)
    rollout, mask = batch.padded()
    padded = np.zeros_like(rollout)
    for i, row in enumerate(trainer):
        padded[i, : len(row)] = row
    summary = run.log_step(
        1, rollout_logprobs=rollout, trainer_logprobs=padded, mask=mask, weight_version=0
    )
    assert summary is not None
    assert run.flush(20)
    run.close()

    stored = server.query("/api/v1/runs/vllm-raw")
    engine = stored["config"]["engine"]
    assert engine["logprobs_mode"] == "raw_logprobs"
    assert engine["async_scheduling"] is False  # requested True; the CPU platform turns it off
    assert engine["sampling"]["temperature"] == pytest.approx(0.7)
    warnings = [a["text"] for a in stored["annotations"] if a["kind"] == "warning"]
    assert any("raw_logprobs" in w for w in warnings)
    k3 = server.query("/api/v1/runs/vllm-raw/series?metric=k3_kl&source=trainer")
    assert k3["points"][0]["last"] == pytest.approx(summary.metrics["k3_kl"], rel=1e-6)
    rollout_side = server.query("/api/v1/runs/vllm-raw/series?metric=rollout_tokens&source=rollout")
    assert rollout_side["points"][0]["last"] == float(sum(batch.seq_lens))
