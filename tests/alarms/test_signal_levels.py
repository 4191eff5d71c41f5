"""The signal families' tuning constants against the figures they were chosen from, never against
themselves: what the real vLLM engine and TRL read on this CPU (literals, each with its source),
and the healthy runs of the seeded alarm corpus, computed here from its generator on the seeds
the packs were tuned on (`TUNING_SEEDS`), with no constant of ours in the computation.

What moving each by a third breaks:
- `signals.ABS_D_TO_K3` (4): a converted level more than twice off an engine figure, either way;
  lower, the public TRL penalty run is no longer critical.
- `signals.SEQ_RATIO_NOISE` (140): lower, ratio drift pages healthy TRL runs of the corpus;
  higher, the sampler-only level on TRL's ratio falls below what a penalised run reads.
- the sampler-only ratio level (14): lower, it pages healthy token means at dense bf16 levels;
  higher, it falls below what a penalised TRL run reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from benchmarks.alarm_corpus import corpus, first_values
from benchmarks.alarm_quality import TUNING_SEEDS
from benchmarks.alarm_renderings import render
from server.alarms.configuring.defaults import PACK, SAMPLER_PACK, SEVERITY_PACK
from server.domain import signals

K3_PER_SQUARED_ABS_D = {
    # Median of k3 / (mean |d|)² per step on the real vLLM engine on this CPU: the demo's runs
    # (benchmarks/signal_calibration.py) and the parity check at a repetition penalty
    # (benchmarks/parity_penalties.py); docs/alarms.md quotes their range, 2.2–7.2.
    "raw logprobs": 2.2,
    "bf16 lm_head": 4.1,
    "repetition penalty 1.1": 5.0,
    "repetition penalty 1.3": 7.2,
}
PUBLIC_TRL_PENALTY_ABS_D = 0.26  # the public TRL run with a repetition penalty (docs/alarms.md)
# TRL's GRPO trainer on this CPU with vLLM, 160-token completions (docs/alarms.md and
# server/domain/sampler.py): mean |d| 0.028–0.030 at a repetition penalty of 1.1; its ratio
# 0.92–1.06 without a penalty, and below 0.8 from the third step with one.
CPU_TRL_PENALTY_ABS_D = 0.028
TRL_PLAIN_RATIO_LOW = 0.92
TRL_PENALISED_RATIO_BELOW = 0.8
DENSE_K3_TOP = 1e-3  # the top of the k3 healthy dense bf16 runs log in the field (METRICS.md)


def _threshold(pack: list[dict[str, Any]], name: str) -> float:
    (spec,) = [spec for spec in pack if spec["name"] == name]
    return float(spec["params"]["threshold"])


def _in_units(metric: str, level: float, *, below: bool) -> float:
    """A level on its family's scale in `metric`'s own units (below 1 or above, for a ratio)."""
    found = signals.BY_METRIC[metric].from_scale(level, 0.5 if below else 1.5)
    assert found is not None
    return found


@dataclass(frozen=True)
class Healthy:
    """Every healthy-regime step of the corpus on the tuning seeds (healthy runs and collapse
    prefixes): its k3, our token mean's ratio deviation ×1e4, and TRL's sequence ratio."""

    k3: np.ndarray
    ratio_dev_1e4: np.ndarray
    trl_ratio: np.ndarray


@pytest.fixture(scope="module")
def healthy() -> Healthy:
    """Drawn once for the module: the small corpus of every tuning seed takes about a second."""
    k3, dev, trl = [], [], []
    for seed in TUNING_SEEDS:
        for trace in corpus(seed, "small"):
            if trace.kind == "mismatch":
                continue
            steps, values = first_values(trace.steps, trace.metrics["k3_kl"])
            cut = len(steps) if trace.onset is None else int((steps < trace.onset).sum())
            k3.append(values[:cut])
            dev.append(first_values(trace.steps, trace.metrics["ratio_dev_1e4"])[1][:cut])
            rendered = render(trace, "trl")
            trl.append(first_values(rendered.steps, rendered.metrics["ratio_mean@trl"])[1][:cut])
    found = Healthy(np.concatenate(k3), np.concatenate(dev), np.concatenate(trl))
    assert len(found.k3) > 50_000  # enough steps for a 99.9th percentile to mean something
    return found


def test_the_abs_d_factor_is_within_a_factor_of_two_of_every_engine_measured_ratio() -> None:
    """A level converted from the k3 scale to a mean |d| is then within a factor of two of the
    k3 each measured engine setting logged at that |d|."""
    for setting, ratio in K3_PER_SQUARED_ABS_D.items():
        assert ratio / 2 <= signals.ABS_D_TO_K3 <= 2 * ratio, setting


def test_penalised_trl_runs_read_past_their_levels_on_the_k3_scale() -> None:
    """The public TRL penalty run is critical (vllm-kl far beyond), and the CPU's penalty-1.1
    run reaches the level runs with a recorded sampler-only setting are held to."""
    abs_d = signals.BY_METRIC["abs_logp_diff_mean"]
    far = _threshold(SEVERITY_PACK, "vllm-kl far beyond")
    assert abs_d.to_scale(PUBLIC_TRL_PENALTY_ABS_D) > far
    sampler_high = _threshold(SAMPLER_PACK, "vllm-kl high (sampler-only setting)")
    assert abs_d.to_scale(CPU_TRL_PENALTY_ABS_D) > sampler_high


def test_ratio_drift_on_trls_ratio_clears_the_healthy_corpus_tail(healthy: Healthy) -> None:
    """TRL's per-sequence ratio of healthy runs with long completions reaches far from 1 (its
    0.1th percentile near 0.38): ratio drift reads it below that, and above its 99.9th."""
    level = _threshold(PACK, "ratio drift")
    low, high = np.percentile(healthy.trl_ratio, [0.1, 99.9])
    assert _in_units("ratio_mean@trl", level, below=True) < low
    assert _in_units("ratio_mean@trl", level, below=False) > high


def test_the_sampler_only_ratio_level_reads_trls_ratio_between_penalised_and_plain_runs() -> None:
    """On TRL's ratio the level must hear the penalised run from the third step, where all that
    was measured is that it reads below 0.8, and spare the runs without a penalty."""
    level = _threshold(SAMPLER_PACK, "ratio drift (sampler-only setting)")
    on_trl = _in_units("ratio_mean@trl", level, below=True)
    assert TRL_PENALISED_RATIO_BELOW <= on_trl < TRL_PLAIN_RATIO_LOW


def test_the_sampler_only_ratio_level_spares_healthy_runs_at_dense_levels(
    healthy: Healthy,
) -> None:
    """A run whose recorded setting moves nothing reads like a healthy one: at the k3 of healthy
    dense bf16 runs, neither our token mean's deviation nor TRL's ratio passes the level on its
    99.9th percentile."""
    level = _threshold(SAMPLER_PACK, "ratio drift (sampler-only setting)")
    dense = healthy.k3 <= DENSE_K3_TOP
    assert dense.sum() > 20_000
    assert np.percentile(np.abs(healthy.ratio_dev_1e4[dense]), 99.9) < level
    trl_low = np.percentile(healthy.trl_ratio[dense], 0.1)
    assert _in_units("ratio_mean@trl", level, below=True) < trl_low
