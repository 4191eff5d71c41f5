"""Fingerprints of the failure modes corrections, quantized engines and MoE routing bring:
each a pure function of a run's series (and, where the setting is the fingerprint, its
config) that answers a sentence when it finds its mode, None when it does not.

- A sampler-side top-p (or top-k) the trainer does not apply: the rollout reports logprobs
  renormalised over the kept tokens, the trainer scores the full vocabulary, so each token's
  ratio p_trainer / p_rollout *is* the kept probability mass, below 1 on every token, and the
  token mean of the ratio sits at or just above the top-p (TRL's own issue measured 0.17 at
  top_k=50). `kept_mass` compares the two.
- A quantized rollout (int8, fp8, w8a8, int4 weights in the engine, bf16 in the trainer): a gap
  above the healthy level that does not grow, on a run whose config names the quantization.
- MoE routing replay switched off or degraded: its active or valid share below 0.9, or its
  fallback share above 5%.
- A gap that grows steadily with training (weights or caches drifting apart): the signal's
  rank correlation with the step above 0.8 and its last third ten times its first.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from server.analysis import attribution_checks as checks
from server.analysis.attribution_checks import Series

TOKEN_RATIOS = ("ratio_mean", "ratio_mean@verl", "ratio_mean@areal", "ratio_mean@ms-swift")
"""Token means of the importance ratio, the ones whose mean is a kept mass (a per-sequence
ratio is a product of them)."""
KEPT_MASS_SLACK = 0.08
"""How far above the top-p a mean kept mass may sit: the sampler keeps the smallest set whose
mass reaches top-p, so a token's kept mass is top-p plus the last token's probability."""
QUANTIZED = ("int8", "fp8", "w8a8", "w8a16", "w4a16", "int4", "awq", "gptq", "nvfp4", "mxfp4")
QUANT_KEYS = ("quantization", "quant_method", "weight_dtype", "quantize", "load_format")
REPLAY_LOW = 0.9
FALLBACK_HIGH = 0.05
GROWTH_RHO = 0.8
GROWTH_FACTOR = 10.0


def _median(series: Series) -> float | None:
    values = list(checks.finite(series).values())
    return float(np.median(values)) if values else None


def _number(text: str) -> float | None:
    try:
        return float(text.strip('"'))
    except ValueError:
        return None


def _setting(config: Mapping[str, str], leaf: str) -> float | None:
    for key, value in config.items():
        if key.rsplit(".", 1)[-1] == leaf and not any(
            part.startswith(("val", "eval")) for part in key.split(".")[:-1]
        ):
            number = _number(value)
            if number is not None:
                return number
    return None


def kept_mass(series: Mapping[str, Series], config: Mapping[str, str]) -> str | None:
    """A token-mean ratio below 1 at the kept mass of the config's top-p (or a top-k)."""
    top_p, top_k = _setting(config, "top_p"), _setting(config, "top_k")
    for metric in TOKEN_RATIOS:
        ratio = _median(series.get(metric, {}))
        if ratio is None or ratio >= 1.0:
            continue
        if top_p is not None and 0 < top_p < 1 and top_p - 0.02 <= ratio <= top_p + KEPT_MASS_SLACK:
            return (
                f"{metric} median {ratio:.3f}, the kept mass of top_p={top_p:g}: the rollout "
                "renormalises over the kept tokens, the trainer scores the whole vocabulary"
            )
        if top_k is not None and top_k > 0 and ratio < 0.99:
            return (
                f"{metric} median {ratio:.3f} below 1 on a run with top_k={top_k:g}: the kept "
                "mass of the sampler's top-k, which the trainer does not renormalise by"
            )
    return None


def quantized(config: Mapping[str, str]) -> str | None:
    """The config's quantized-rollout setting, as `key=value`; None without one."""
    for key, value in config.items():
        leaf = key.rsplit(".", 1)[-1].lower()
        text = value.lower()
        if leaf in QUANT_KEYS and any(word in text for word in QUANTIZED):
            return f"{key}={value}"
    return None


def routing_replay(series: Mapping[str, Series]) -> str | None:
    """Routing replay off or degraded, from its shares."""
    for metric in ("routing_replay_active", "routing_replay_valid"):
        values = checks.finite(series.get(metric, {}))
        if values and min(values.values()) < REPLAY_LOW:
            low = min(values.values())
            step = min(s for s, v in values.items() if v < REPLAY_LOW)
            return f"{metric} fell to {low:.2f} (from step {step}): MoE routes live again"
    fallback = checks.finite(series.get("routing_replay_fallback", {}))
    if fallback and max(fallback.values()) > FALLBACK_HIGH:
        return f"routing replay fell back on {max(fallback.values()):.0%} of token routes"
    return None


def growing(signal: Series) -> str | None:
    """A gap that grows steadily over the run."""
    points = sorted(checks.finite(signal).items())
    if len(points) < 3 * checks.MIN_STEPS:
        return None
    steps, values = [s for s, _ in points], [v for _, v in points]
    rho = checks.spearman(steps, values)
    first, last = checks.thirds(values)
    if rho > GROWTH_RHO and first > 0 and last > GROWTH_FACTOR * first:
        return (
            f"the gap grows steadily with training (rank correlation with the step {rho:.2f}, "
            f"{first:.3g} → {last:.3g}): weights or caches drifting apart"
        )
    return None
