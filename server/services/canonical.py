"""Canonical metric names the server knows about (METRICS.md); any other name is stored too."""

from __future__ import annotations

HEADLINE = "k3_kl"

LATEST_METRICS: tuple[str, ...] = (
    "k3_kl",
    "reverse_k3_kl",
    "k1_kl",
    "ratio_dev_1e4",
    "ratio_abs_dev",
    "mult_prob_error",
    "rollout_clip_rate",
    "clip_rate",
    "kl_new_old",
    "entropy",
    "reward_mean",
    "grad_norm",
    "lag",
    "ess_token",
    "ess_seq",
    "prefix_cache_hit_rate",
)
