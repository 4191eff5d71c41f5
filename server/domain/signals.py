"""Mismatch signals: every metric that measures the training–inference gap, ranked, on one scale.

Trainers log the gap under different formulas: our collectors, verl and NeMo-RL log k3
("vllm-kl"); OpenRLHF and ms-swift log k1; TRL logs the mean |d| and a sequence-level importance
ratio; slime logs sequence means. A rule of the default pack names a *family* of signals
(`VLLM_KL`, `RATIO`) instead of one metric, and each series of a run is watched through the
strongest member it logs: the first of the family's ranked list below that the series has.

**One scale per family.** A family's rules keep one set of numbers, in the units of its first
member (k3 for vllm-kl, ratio_dev_1e4 for ratio drift); every other member is converted to that
scale before a rule judges it, and the verdict's value and threshold are converted back, so an
alert reads in the signal's own units ("abs_logp_diff_mean 0.27 above 0.25"). The conversions:

| signal | to the family scale | why |
|---|---|---|
| k3, reverse k3 (token and sequence level), ms-swift's clamped k3 | x | estimators of the same KL (reverse k3 of the other direction, equal to second order); the clamp only bites past a k3 of 10 |
| k1 (token and sequence level) | \\|x\\| | an unbiased but noisy estimator of the same KL whose sign flips with the direction of a systematic offset: on the demo's raw-logprobs runs k1 ≈ −2 k3 |
| mean \\|d\\|, mean \\|r − 1\\| | `ABS_D_TO_K3` · x² | for small d, k3 ≈ d²/2, and (E\\|d\\|)² is E d² shrunk by the shape of d's distribution (2/π for a Gaussian); the factor is measured on real vLLM engine data, see `ABS_D_TO_K3` |
| mult prob error | `ABS_D_TO_K3` · (x − 1)² | E exp\\|d\\| − 1 = E\\|d\\| + O(d²) |
| ROLL's geometric-mean ratio | \\|log x\\| | exp(mean_t d) per sequence is exp(−k1) of it: −log of the mean over sequences is, to first order, a k1 estimate, read as k1 is |
| ratio_dev_1e4 (token and sequence level) | x | the family's unit |
| ratio mean (token, sequence) | (x − 1) · 10⁴ | the definition of ratio_dev_1e4 |
| verl's, ms-swift's and AReaL's importance-weight mean | (x − 1) · 10⁴ above 1, that / `CAPPED_SHORTFALL` below | truncated per token (their token-level modes): above 1 a token mean of r, below 1 also the healthy gap the cap cuts off, see `CAPPED_SHORTFALL` |
| TRL's importance-ratio mean | (x − 1) · 10⁴ / `SEQ_RATIO_NOISE` | one ratio per sequence (TRL's default `sequence_mask`), masked beyond its cap: far noisier than a token mean, and pulled down by long completions, see `SEQ_RATIO_NOISE` |

Three more families watch what corrects or removes the gap rather than the gap: `ESS` (the
importance weights' normalised effective sample size), `MASKED` (the share of tokens a
correction masks or rejects) and `REPLAY` (MoE routing replay's active and valid shares). Their
members are in their own units (fractions, no conversion), and a view never takes its headline
from them (`GAP_FAMILIES`).

Max-type metrics (`abs_logp_diff_max`, `ratio_max`, `k3_kl_max`) are never members: on healthy
runs they often sit at a clamp or cap every step, so a level on them says nothing.

Conversions are monotone (within a side of 1 for ratios), so a breach in the family's scale is a
breach in the signal's own units at the converted threshold: a z-score in log space is unchanged
by x ↦ c·x² (both the rise and the noise double), and only absolute levels move.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Literal

SIGNAL_PREFIX = "signal:"
VLLM_KL = "signal:vllm-kl"
"""The vllm-kl family: how far apart the two policies are (k3 scale)."""
RATIO = "signal:ratio"
"""The ratio-drift family: a systematic offset of the importance ratio from 1 (ratio_dev_1e4
scale) — raw instead of processed logprobs, a sampler-only penalty, top-p renormalisation."""
ESS = "signal:ess"
"""The correction-health family of importance-weight effective sample sizes, normalised to
(0, 1]: how much of the batch an importance-sampling correction still learns from."""
MASKED = "signal:masked"
"""The correction-health family of the share of tokens a correction masks, rejects or caps
(its own bounds where a framework logs it, ours — [1/2, 2] — for our collectors)."""
REPLAY = "signal:replay"
"""MoE rollout routing replay: the share of routers replaying the rollout's routes, and the
share of replayed routes that were valid — 1 on healthy replay."""
FAMILIES: tuple[str, ...] = (VLLM_KL, RATIO, ESS, MASKED, REPLAY)
GAP_FAMILIES: tuple[str, ...] = (VLLM_KL, RATIO)
"""The families that measure the gap itself (the others measure its correction)."""

ABS_D_TO_K3 = 4.0
"""k3 ≈ ABS_D_TO_K3 · (mean |d|)². A Gaussian d gives π/4 ≈ 0.79; a heavier-tailed d, whose gap
sits on a minority of tokens, gives more (a share q of tokens at gap a gives 1/(2q)). Measured on
the real vLLM engine on this CPU, the median of k3 / (mean |d|)² per step is 2.2 for raw logprobs
and 4.1 for a bf16 lm_head (the demo's runs, `benchmarks/signal_calibration.py`), 5.0 for a
sampler-only repetition penalty of 1.1 and 7.2 at 1.3 (`benchmarks/parity_penalties.py`: k3
2.3e-3 at a mean |d| of 0.021); it falls below 1 only where k3 is past 1 and the run long gone.
4 is the middle of those engine figures: a converted level is within a factor of two of the k3
those runs logged, and a TRL run at a mean |d| of 0.25 (the public repetition-penalty run) reads
a k3 of 0.25, over ten times the vllm-kl high rule's 0.02."""

SEQ_RATIO_NOISE = 140.0
"""How much noisier a per-sequence, masked importance-ratio mean is than a token mean of r, as a
divisor of its deviation. TRL's ratio is one per sequence, exp of the sum of its tokens' gaps,
and its default `sequence_mask` zeroes sequences past its cap, so on long completions a healthy
per-token gap pulls the mean itself down: the alarm corpus's healthy runs (k3 up to 1e-2,
completions of 32–256 tokens) hold it as low as 0.35 for three steps, while real TRL GRPO runs on
this CPU read 0.92–1.06 at 160 tokens. Dividing by 140 puts the ratio-drift rule's 50 at a mean
ratio of 0.3 (or 1.7), below every healthy run; runs whose config records a sampler-only setting
are held to 0.8 by a rule of their own (`server/alarms/configuring/defaults.py`)."""

CAPPED_SHORTFALL = 3.0
"""How much wider a token-truncated weight mean (min(r, 2): verl, ms-swift, AReaL) reads below 1
than a plain token mean of r, as a divisor there: the cap cuts the top of a healthy, balanced
gap, so the wider the gap the lower the mean (healthy 99.9th percentile on the alarm corpus: 144
×1e-4 below 1, 21 above; 42 for a plain mean; `server/alarms/configuring/defaults.py`, ratio drift)."""

_FRACTION = "fraction of tokens (or sequences)"


Conversion = Literal[
    "same",
    "magnitude",
    "log_magnitude",
    "square",
    "excess_square",
    "deviation",
    "scaled_deviation",
    "capped_deviation",
]
Level = Literal["token", "sequence"]


@dataclass(frozen=True, slots=True)
class Signal:
    """One metric a family reads, how it converts to the family's scale, and what it means."""

    metric: str
    family: str
    label: str
    meaning: str
    conversion: Conversion = "same"
    level: Level = "token"

    def to_scale(self, value: float) -> float:
        """The value on the family's scale (NaN and ±Inf pass through as they are)."""
        if not math.isfinite(value):
            return value
        if self.conversion == "magnitude":
            return abs(value)
        if self.conversion == "log_magnitude":
            return abs(math.log(value)) if value > 0 else math.inf
        if self.conversion == "square":
            return ABS_D_TO_K3 * value * value
        if self.conversion == "excess_square":
            excess = value - 1.0
            return ABS_D_TO_K3 * excess * excess
        if self.conversion.endswith("deviation"):  # a ratio mean
            return (value - 1.0) * 1e4 / self._divisor(below=value < 1.0)
        return value

    def from_scale(self, scaled: float | None, near: float) -> float | None:
        """A threshold on the family's scale in this signal's units; `near` (a value of the
        signal) picks the side of 1 for ratio means, whose conversion is not one-to-one."""
        if scaled is None or not math.isfinite(scaled):
            return scaled
        if self.conversion == "magnitude":
            return -scaled if math.isfinite(near) and near < 0 else scaled
        if self.conversion == "log_magnitude":
            below = math.isfinite(near) and near < 1.0
            return math.exp(-scaled if below else min(scaled, 700.0))
        if self.conversion == "square":
            return math.sqrt(max(scaled, 0.0) / ABS_D_TO_K3)
        if self.conversion == "excess_square":
            return 1.0 + math.sqrt(max(scaled, 0.0) / ABS_D_TO_K3)
        if self.conversion.endswith("deviation"):  # a ratio mean
            below = math.isfinite(near) and near < 1.0
            offset = abs(scaled) * self._divisor(below=below) / 1e4
            return 1.0 - offset if below else 1.0 + offset
        return scaled

    def _divisor(self, *, below: bool) -> float:
        """What a ratio mean's deviation (×1e4) is divided by on the family's scale."""
        if self.conversion == "scaled_deviation":
            return SEQ_RATIO_NOISE
        return CAPPED_SHORTFALL if below and self.conversion == "capped_deviation" else 1.0


def _kl(metric: str, label: str, meaning: str, conversion: Conversion = "same") -> Signal:
    level: Level = "sequence" if "_seq" in metric else "token"
    return Signal(metric, VLLM_KL, label, meaning, conversion, level)


def _ratio(metric: str, label: str, meaning: str, conversion: Conversion = "same") -> Signal:
    level: Level = "sequence" if "_seq" in metric or "@" in metric else "token"
    return Signal(metric, RATIO, label, meaning, conversion, level)


_K3 = "KL(rollout ‖ trainer) per token, in nats: ≈ 1e-5 … 1e-3 on healthy dense bf16 runs"
_ABS_D = "mean |log p_trainer − log p_rollout| per token, in nats: ≈ 0.01 … 0.05 when healthy"
_RATIO = "importance ratio p_trainer / p_rollout, whose mean stays within 0.5% of 1 when healthy"
_CAPPED = ": within a few ×1e-4 of 1 above it when healthy, lower below it the wider the gap"

SIGNALS: tuple[Signal, ...] = (
    _kl("k3_kl", "vllm-kl (k3)", _K3),
    _kl("k3_kl_seq", "vllm-kl (k3, per sequence)", _K3 + " (mean over sequences)"),
    _kl(
        "k1_kl",
        "vllm-kl (k1)",
        "mean log p_rollout − log p_trainer per token (k1 estimate of the same KL, noisier; "
        "far below 0 when the trainer's logprobs sit above the rollout's)",
        "magnitude",
    ),
    _kl(
        "k1_kl_seq",
        "vllm-kl (k1, per sequence)",
        "k1 estimate of the KL, mean over sequences",
        "magnitude",
    ),
    _kl(
        "k1_kl@areal",
        "vllm-kl (k1, AReaL)",
        "AReaL's mean lT − lR (behave_approx_kl), negated to k1, over the tokens its "
        "behaviour-weight cap keeps",
        "magnitude",
    ),
    _kl(
        "k1_kl@rlinf",
        "vllm-kl (k1, RLinf)",
        "RLinf's mean lR − lT (behav_approx_kl) over the tokens under its behaviour-weight "
        "threshold",
        "magnitude",
    ),
    Signal(
        "actor/train_infer_ratio_geometric_mean",
        VLLM_KL,
        "geometric-mean ratio (ROLL)",
        "ROLL's mean over sequences of exp(mean log p_trainer − log p_rollout): 1 is parity, "
        "−log of it estimates the KL (k1, per sequence)",
        "log_magnitude",
        "sequence",
    ),
    _kl("k3_kl@ms-swift", "vllm-kl (k3, ms-swift)", _K3 + " (per-token values clamped at 10)"),
    _kl("reverse_k3_kl", "reverse vllm-kl (k3)", "KL(trainer ‖ rollout) per token, in nats"),
    _kl("abs_logp_diff_mean", "mean |logp diff|", _ABS_D, "square"),
    _kl("abs_logp_diff_mean_seq", "mean |logp diff| (per sequence)", _ABS_D, "square"),
    _kl("ratio_abs_dev", "mean |ratio − 1|", "mean |p_trainer/p_rollout − 1| per token", "square"),
    _kl(
        "ratio_abs_dev_seq",
        "mean |ratio − 1| (per sequence)",
        "mean |r − 1|, over sequences",
        "square",
    ),
    _kl(
        "mult_prob_error",
        "mult prob error",
        "mean exp|d| per token: 1 is parity, above 1.05 warrants a look",
        "excess_square",
    ),
    _kl(
        "mult_prob_error_seq",
        "mult prob error (per sequence)",
        "mean exp|d|, over sequences",
        "excess_square",
    ),
    _ratio(
        "ratio_dev_1e4",
        "ratio drift (×1e4)",
        "(mean importance ratio − 1) × 10⁴: a steady "
        "offset means raw instead of processed logprobs or a sampler-only setting",
    ),
    _ratio(
        "ratio_dev_1e4_seq",
        "ratio drift (×1e4, per sequence)",
        "(mean over sequences of the ratio − 1) × 10⁴",
    ),
    _ratio("ratio_mean", "importance ratio mean", _RATIO, "deviation"),
    _ratio("ratio_mean_seq", "importance ratio mean (per sequence)", _RATIO, "deviation"),
    _ratio(
        "ratio_mean@trl",
        "importance ratio mean (TRL)",
        "TRL's mean importance ratio, one per sequence and masked past its cap: ≈ 1 ± 0.06 "
        "when healthy on short completions, lower on long ones",
        "scaled_deviation",
    ),
    _ratio(
        "ratio_mean@verl",
        "importance weight mean (verl)",
        "verl's mean rollout importance weight (rollout_is_mean), truncated per token" + _CAPPED,
        "capped_deviation",
    ),
    _ratio(
        "ratio_mean@areal",
        "importance weight mean (AReaL)",
        "AReaL's mean behaviour importance weight over the tokens its cap keeps" + _CAPPED,
        "capped_deviation",
    ),
    _ratio(
        "ratio_mean@ms-swift",
        "importance weight mean (ms-swift)",
        "ms-swift's mean importance weight, truncated per token" + _CAPPED,
        "capped_deviation",
    ),
    # -- correction health: in their own units (fractions), no conversion --
    Signal(
        "ess_token_clamped",
        ESS,
        "IS effective sample size (clamped weights)",
        "normalised ESS of the token weights clamped to [1/2, 2]: 1 is every token counting "
        "fully, verl's docs look below 0.3",
    ),
    Signal(
        "ess_token_clamped@verl",
        ESS,
        "IS effective sample size (verl)",
        "verl's normalised ESS of its truncated importance weights",
    ),
    Signal(
        "ess_token_clamped@ms-swift",
        ESS,
        "IS effective sample size (ms-swift)",
        "ms-swift's normalised ESS of its truncated importance weights",
    ),
    Signal("ess_token", ESS, "IS effective sample size", "normalised ESS of the raw token weights"),
    Signal(
        "mis_token_rate@verl",
        MASKED,
        "masked tokens (verl)",
        f"{_FRACTION} verl's rejection sampling masks, at its configured bounds",
    ),
    Signal(
        "mis_token_rate@prime-rl",
        MASKED,
        "masked tokens (prime-rl)",
        f"{_FRACTION} prime-rl's trust-region mask drops",
    ),
    Signal(
        "mis_token_rate@skyrl",
        MASKED,
        "masked tokens (SkyRL)",
        f"{_FRACTION} SkyRL's token mask drops, at its configured bounds",
    ),
    Signal(
        "mis_token_rate@roll",
        MASKED,
        "masked tokens (ROLL)",
        f"{_FRACTION} ROLL's train–infer filters drop",
    ),
    Signal(
        "mis_token_rate@areal",
        MASKED,
        "masked tokens (AReaL)",
        f"{_FRACTION} AReaL's rejection sampling masks or clamps",
    ),
    Signal(
        "mis_token_rate_high@rlinf",
        MASKED,
        "masked tokens (RLinf)",
        f"{_FRACTION} RLinf's behaviour-weight threshold drops",
    ),
    Signal(
        "mis_token_rate",
        MASKED,
        "masked tokens (IcePop [1/2, 2])",
        f"{_FRACTION} whose ratio leaves [1/2, 2]: what a token mask at those bounds drops",
    ),
    Signal(
        "mis_seq_rate@verl",
        MASKED,
        "masked sequences (verl)",
        f"{_FRACTION} verl's rejection sampling rejects",
        level="sequence",
    ),
)
"""Every member, each family's in rank order: the first one a series logs is the one read."""
SIGNALS += (
    Signal(
        "routing_replay_active",
        REPLAY,
        "routing replay active",
        "share of the step's MoE router passes that replayed the rollout's expert choices: 1 "
        "when replay is on; without it ~10% of routers disagree per forward pass",
    ),
    Signal(
        "routing_replay_valid",
        REPLAY,
        "routing replay valid",
        "share of the replayed routes that were valid: 1 when healthy",
    ),
)

BY_METRIC: dict[str, Signal] = {s.metric: s for s in SIGNALS}
MEMBERS: dict[str, tuple[str, ...]] = {
    family: tuple(s.metric for s in SIGNALS if s.family == family) for family in FAMILIES
}


def is_family(name: str) -> bool:
    return name in MEMBERS


def members(name: str) -> tuple[str, ...]:
    """A family's members in rank order; a plain metric name stands for itself."""
    return MEMBERS.get(name, (name,))


def strongest(family: str, present: Container[str]) -> Signal | None:
    """The first member of `family` found in `present`."""
    for metric in MEMBERS.get(family, ()):
        if metric in present:
            return BY_METRIC[metric]
    return None


def headline(present: Container[str]) -> Signal | None:
    """What a view shows as "the" mismatch of a run that logs the names in `present`: its
    strongest vllm-kl signal, else its strongest ratio signal."""
    return strongest(VLLM_KL, present) or strongest(RATIO, present)


def describe(metric: str) -> str:
    """A signal's name and meaning in words, for alert bodies and chart titles; a metric that
    is no signal is named as it is."""
    signal = BY_METRIC.get(metric)
    return metric if signal is None else f"{signal.label} — {signal.meaning}"
