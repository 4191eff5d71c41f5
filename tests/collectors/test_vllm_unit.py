"""RolloutCollector on hand-made request outputs (no engine): each metric against arithmetic."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS  # noqa: N814 - short, read as "namespace"
from typing import Any

import pytest

from collectors import RolloutCollector
from collectors._vllm import parity_warnings


class Recorder:
    def __init__(self) -> None:
        self.configs: list[Any] = []
        self.records: list[tuple[int, dict[str, float], dict[str, Any]]] = []
        self.notes: list[str] = []

    def update_config(self, config: Any) -> bool:
        self.configs.append(config)
        return True

    def log_metrics(self, step: int, metrics: Any, **kwargs: Any) -> bool:
        self.records.append((step, dict(metrics), kwargs))
        return True

    def annotate(self, text: str, step: int | None = None, **kwargs: Any) -> bool:
        self.notes.append(text)
        return True


def engine(mode: str = "processed_logprobs", prefix: bool = False) -> Any:
    config = NS(
        model_config=NS(
            logprobs_mode=mode, dtype="torch.float32", enforce_eager=True, model="tiny"
        ),
        scheduler_config=NS(async_scheduling=False, enable_chunked_prefill=True),
        cache_config=NS(enable_prefix_caching=prefix),
    )
    return NS(llm_engine=NS(vllm_config=config))


def completion(tokens: list[int], logprobs: list[float], reason: str) -> Any:
    return NS(
        token_ids=tokens,
        logprobs=[{t: NS(logprob=lp)} for t, lp in zip(tokens, logprobs, strict=True)],
        finish_reason=reason,
    )


def outputs() -> list[Any]:
    return [
        NS(
            prompt_token_ids=[1, 2, 3, 4],
            num_cached_tokens=4,
            outputs=[completion([5, 6], [-0.5, -1.5], "stop"), completion([7], [-2.0], "length")],
        ),
        NS(
            prompt_token_ids=[1, 2, 3, 4, 8, 9],
            num_cached_tokens=0,
            outputs=[completion([10, 11, 12], [-0.1, -0.2, -0.3], "length")],
        ),
    ]


def test_observe_posts_rollout_metrics_and_returns_logprobs() -> None:
    run = Recorder()
    collector = RolloutCollector(run, engine(), actor="rollout-1")
    collector.on_trainer_version(5)
    batch = collector.observe(outputs(), step=3, weight_version=4, elapsed_s=2.0)
    assert batch.logprobs == [[-0.5, -1.5], [-2.0], [-0.1, -0.2, -0.3]]
    assert batch.seq_lens == [2, 1, 3]
    values, mask = batch.padded()
    assert values.shape == (3, 3)
    assert mask.sum() == 6
    step, metrics, kwargs = run.records[-1]
    assert step == 3
    assert kwargs["source"] == "rollout"
    assert kwargs["actor"] == "rollout-1"
    assert metrics["rollout_tokens"] == 6
    assert metrics["rollout_sequences"] == 3
    assert metrics["rollout_logprob_mean"] == pytest.approx(-4.6 / 6)
    ppl = (math.exp(1.0) + math.exp(2.0) + math.exp(0.2)) / 3
    assert metrics["rollout_ppl"] == pytest.approx(ppl)
    assert metrics["prefix_cache_hit_rate"] == pytest.approx(4 / 10)
    assert metrics["finish_stop_rate"] == pytest.approx(1 / 3)
    assert metrics["finish_length_rate"] == pytest.approx(2 / 3)
    assert metrics["generation_tokens_per_s"] == pytest.approx(3.0)
    assert metrics["lag"] == 1.0
    assert run.configs[0]["engine"]["logprobs_mode"] == "processed_logprobs"


def test_weight_update_is_timed_and_annotated() -> None:
    run = Recorder()
    collector = RolloutCollector(run, engine())
    collector.observe(outputs(), step=7)
    with collector.weight_update(2):
        pass
    assert collector.weight_version == 2
    step, metrics, _kwargs = run.records[-1]
    assert step == 7
    assert metrics["weight_version"] == 2.0
    assert metrics["weight_update_seconds"] >= 0
    assert any("v2" in n for n in run.notes)


def test_weight_update_notes_name_versions_and_never_none() -> None:
    run = Recorder()
    collector = RolloutCollector(run, engine())
    collector.observe(outputs(), step=1)
    with collector.weight_update(1):
        pass
    with collector.weight_update(2):
        pass
    notes = [n for n in run.notes if n.startswith("weight update")]
    assert [n.split(" (")[0] for n in notes] == ["weight update first v1", "weight update v1 → v2"]
    assert not any("None" in n for n in notes)


@pytest.mark.parametrize(
    ("mode", "sampling", "prefix", "expect"),
    [
        ("raw_logprobs", {"temperature": 0.7}, False, ["raw_logprobs"]),
        ("raw_logprobs", {"temperature": 1.0, "top_p": 1.0}, False, []),
        ("processed_logprobs", {"temperature": 0.7}, False, []),
        ("processed_logprobs", {"temperature": 0.7, "top_p": 0.9}, False, ["top_p=0.9"]),
        ("processed_logprobs", {"temperature": 1.0}, True, ["reset_prefix_cache"]),
    ],
)
def test_parity_warnings_name_the_cause(
    mode: str, sampling: dict[str, float], prefix: bool, expect: list[str]
) -> None:
    texts = parity_warnings({"logprobs_mode": mode, "enable_prefix_caching": prefix}, sampling)
    assert len(texts) == len(expect)
    for text, fragment in zip(texts, expect, strict=True):
        assert fragment in text


def test_warning_is_posted_once_as_an_annotation() -> None:
    run = Recorder()
    params = NS(temperature=0.7, top_p=1.0, top_k=0, n=1, max_tokens=8)
    collector = RolloutCollector(run, engine("raw_logprobs"), sampling_params=params)
    collector.observe(outputs(), step=0, sampling_params=params)
    collector.observe(outputs(), step=1, sampling_params=params)
    assert sum("raw_logprobs" in n for n in run.notes) == 1
