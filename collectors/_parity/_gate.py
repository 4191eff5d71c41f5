"""The parity gate: thresholds on a report, and the engine settings that explain a failure.

Defaults, from measurements and the field (METRICS.md, "Healthy magnitudes"):
- `max_k3` = 1e-3. A matched engine and trainer in fp32 agree to rounding (k3 ≈ 1e-12 on the
  tiny test model); a bf16 lm_head on one side gives ≈ 1e-6 … 1e-4; dense models in production
  sit at 1e-5 … 1e-3 and NeMo treats "below 1e-3" as acceptable, so 1e-3 is the top of healthy.
  Raw logprobs at temperature 0.7 give 1e-3 … 1e-1 and a stale prefix cache k3 of order 1.
- `max_abs_ratio_dev_1e4` = 100, i.e. a mean importance ratio off 1 by 1 %. Sampled from the
  rollout distribution, E[r] = 1 exactly, so a healthy check shows only sampling noise (≈ 14 at
  k3 = 1e-3 over 1,000 tokens); raw logprobs at temperature ≠ 1 shift it by hundreds to
  thousands — the write-ups' "ratio drift".
- `max_full_kl` = `max_k3`, on the whole-distribution KL when the check compared whole
  distributions (`full_distribution`): the exact KL over the vocabulary that k3 estimates from
  the sampled tokens, so the same bound; checked only where a phase reports it.
- `max_self_logp_diff`, the engine against itself (`_self`): the largest |Δ logp| of the same
  token in the same context between the requests sent alone and batched. 0 when the engine runs
  batch-invariant (its config says `batch_invariant`, which also labels the stored report
  exact-parity): invariance is exact or it is broken, and at 0 a token sampled differently or a
  distribution that moved at all fails too. Otherwise 1 nat: rounding moves a token's logprob
  by its logit's rounding, a few hundredths in bf16 (8 bits of mantissa on a logit of 20 is
  0.06) — on the tiny model on a CPU, 3e-6 in fp32 and 3e-3 in bf16 over 160-token
  completions — while a batching bug (a request attending to another's tokens, a padding or
  mask error, a kernel wrong for one batch shape) moves whole nats. Set it to your engine's
  measured level to hold it there.
A non-finite value always fails: NaN is a broken engine, not a pass.

A failure is explained by the settings known to cause one, the most likely first. A sampler-only
setting off its neutral value (a repetition, presence or frequency penalty, min_p) comes before
everything else: no trainer applies it, so the mismatch it causes is certain and present from the
first step (a public GRPO run whose vLLM applied a repetition penalty its trainer did not logged
a mean logp difference of 0.25 nats/token and importance ratios of 3e-5 … 0.06 throughout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from collectors._parity._engine import NEUTRAL
from collectors._parity._report import ParityReport, wire

DEFAULT_MAX_K3 = 1e-3
DEFAULT_MAX_ABS_RATIO_DEV_1E4 = 100.0
DEFAULT_MAX_SELF_LOGP_DIFF = 1.0
"""Without a batch-invariant mode; with one, the default is 0 (`self_limit`)."""


@dataclass(frozen=True)
class Exceeded:
    """One threshold one phase went past."""

    step: int
    phase: str
    metric: str
    value: float
    limit: float


@dataclass(frozen=True)
class GateResult:
    passed: bool
    exceeded: tuple[Exceeded, ...]
    # flattened config key -> why its value is suspect here; the most likely cause first
    suspicious: dict[str, str]
    limits: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "limits": self.limits,
            "exceeded": [
                {
                    "step": x.step,
                    "phase": x.phase,
                    "metric": x.metric,
                    "value": wire(x.value),
                    "limit": x.limit,
                }
                for x in self.exceeded
            ],
            "suspicious": self.suspicious,
        }


def evaluate(
    report: ParityReport,
    *,
    max_k3: float = DEFAULT_MAX_K3,
    max_abs_ratio_dev_1e4: float = DEFAULT_MAX_ABS_RATIO_DEV_1E4,
    max_full_kl: float | None = None,
    max_self_logp_diff: float | None = None,
) -> GateResult:
    """Every (phase, metric) past its limit; the gate passes when there is none. The
    whole-distribution KL is held to `max_k3` unless `max_full_kl` says otherwise; the engine
    against itself to `max_self_logp_diff`, by default `self_limit(report)`."""
    limits = (("k3_kl", max_k3), ("ratio_dev_1e4", max_abs_ratio_dev_1e4))
    optional = (
        "full_kl_mean",
        max_k3 if max_full_kl is None else max_full_kl,
    )  # only where the check compared distributions
    exceeded = []
    for phase in report.phases:
        present = (optional,) if optional[0] in phase.metrics else ()
        for metric, limit in (*limits, *present):
            value = phase.metrics.get(metric, math.nan)
            if not math.isfinite(value) or abs(value) > limit:
                exceeded.append(Exceeded(phase.step, phase.name, metric, value, limit))
    checked = dict(limits)
    if any(optional[0] in phase.metrics for phase in report.phases):
        checked[optional[0]] = optional[1]
    found = suspicious(report.config())
    if report.self_batches:
        limit = self_limit(report) if max_self_logp_diff is None else max_self_logp_diff
        checked["self_logp_diff_max"] = limit
        itself = self_exceeded(report, limit)
        if itself:
            why = {"engine.batch_invariant": batch_dependent(report, itself)}
            found = {**why, **found} if not exceeded else {**found, **why}
        exceeded += itself
    return GateResult(not exceeded, tuple(exceeded), found, checked)


def self_limit(report: ParityReport) -> float:
    """0 for an engine that runs batch-invariant (exact or broken), else the default."""
    return 0.0 if _on(report.engine.get("batch_invariant")) else DEFAULT_MAX_SELF_LOGP_DIFF


def self_exceeded(report: ParityReport, limit: float) -> list[Exceeded]:
    """Each batch size whose largest |Δ logp| against the engine alone is past `limit`; at 0,
    also each whose tokens or whole distributions differed at all (exact means the same).

    Past 0, one sequence sampling another token follows from rounding near a sampling boundary,
    but most of them doing so is a batch that changes what is sampled: the logprobs are
    compared only up to each sequence's first other token, so such a batch would otherwise
    read a small difference, or none (all diverged at their first token: nothing compared)."""
    out = []
    for b in report.self_batches[1:]:
        name = f"batch of {b.batch_size} against the same requests alone"
        value = b.metrics.get("logp_diff_max", math.nan)
        if not math.isfinite(value) or value > limit:
            out.append(Exceeded(0, name, "self_logp_diff_max", value, limit))
        if limit > 0:
            sequences, diverged = b.metrics.get("sequences", 0.0), b.metrics.get("diverged", 0.0)
            if diverged > sequences / 2:
                out.append(Exceeded(0, name, "self_diverged", diverged, sequences / 2))
            continue
        for metric in ("diverged", "full_tv_max"):
            value = b.metrics.get(metric, 0.0)
            if value != 0:
                out.append(Exceeded(0, name, f"self_{metric}", value, 0.0))
    return out


def batch_dependent(report: ParityReport, itself: list[Exceeded]) -> str:
    """What the engine disagreeing with itself means, for the team reading the gate."""
    logp = [x for x in itself if x.metric == "self_logp_diff_max"] or itself
    worst = max(logp, key=lambda x: x.value if math.isfinite(x.value) else math.inf)
    seen = f"{worst.metric} = {worst.value:.3g} for the {worst.phase}"
    if _on(report.engine.get("batch_invariant")):
        return (
            f"batch_invariant is on, yet the engine disagrees with itself across batch sizes "
            f"({seen}): the invariance does not hold for this model and configuration (an "
            "operation outside the batch-invariant kernels), so runs labelled exact parity "
            "will not read 0 — they must"
        )
    return (
        f"batch-dependent numerics: the same request with the same seed gets other logprobs "
        f"when it shares the engine's batch ({seen}); a trainer never sees the rollout's batch, "
        "so no trainer fix removes this part of the mismatch. A batch-invariant mode (vLLM: "
        "VLLM_BATCH_INVARIANT=1) makes it 0; a run labelled exact parity must have 0"
    )


def _on(value: Any) -> bool:
    return str(value).strip().lower() in {"true", "1", "yes", "on"}


def suspicious(config: dict[str, Any]) -> dict[str, str]:
    """Settings of a parity config whose values are known to cause a mismatch, keyed by their
    flattened name (`engine.logprobs_mode`), each with the reason in this configuration, in
    order of likelihood: sampler-only settings first, then the rest in the order of the
    parity vocabulary (logprobs mode, prefix cache, head dtype, dtype)."""
    engine = config.get("engine", {})
    trainer_dtype = str(config.get("trainer", {}).get("dtype", "float32"))
    update = config.get("parity", {})
    mode = str(engine.get("logprobs_mode") or "raw_logprobs")
    out = sampler_only(engine, mode)
    temperature = float(engine.get("temperature", 1.0))
    top_p = float(engine.get("top_p", 1.0))
    top_k = int(engine.get("top_k", 0) or 0)
    if mode.startswith("raw") and (temperature != 1.0 or top_p < 1.0 or top_k > 0):
        out["engine.logprobs_mode"] = (
            f"{mode} with temperature={temperature:g}, top_p={top_p:g}, top_k={top_k}: the "
            "engine reports logprobs before these, the tokens were sampled after them; use "
            "processed_logprobs"
        )
    weight_update = str(update.get("weight_update", "none"))
    if (
        engine.get("enable_prefix_caching")
        and weight_update != "none"
        and not update.get("reset_prefix_cache")
    ):
        out["engine.enable_prefix_caching"] = (
            "prefix caching on and not reset after the weight update: cached prompt state "
            "from the old weights is reused"
        )
    head = str(engine.get("head_dtype", ""))
    if head and head != trainer_dtype:
        out["engine.head_dtype"] = (
            f"lm_head in {head} on the engine, {trainer_dtype} in the trainer"
        )
    dtype = str(engine.get("dtype", ""))
    if dtype and dtype != trainer_dtype:
        out["engine.dtype"] = f"engine weights in {dtype}, trainer in {trainer_dtype}"
    return out


_WHAT = {
    "repetition_penalty": "it scales the logits of tokens already in the prompt or completion",
    "presence_penalty": "it shifts the logits of tokens already in the completion",
    "frequency_penalty": "it shifts each token's logit by how often the completion has it",
    "min_p": "it drops tokens below min_p × the top probability and renormalises the rest",
}


def sampler_only(engine: dict[str, Any], mode: str) -> dict[str, str]:
    """The sampler-only settings off their neutral value, each with why it is suspect."""
    out: dict[str, str] = {}
    for name, neutral in NEUTRAL.items():
        value = engine.get(name)
        if value is None or float(value) == neutral:
            continue
        seen = (
            "the engine's raw logprobs leave it out, yet the tokens were sampled with it"
            if mode.startswith("raw")
            else "the engine's logprobs are of a distribution the trainer never computes"
        )
        out[f"engine.{name}"] = (
            f"{name}={float(value):g} is applied by the sampler and not by the trainer: "
            f"{_WHAT[name]}, so {seen} — a mismatch from the first step; set it to "
            f"{neutral} or apply it in the trainer's logprobs too"
        )
    return out
