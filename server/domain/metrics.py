"""Canonical metric names the server and the dashboard know (METRICS.md); any other name is
stored and shown too. Every list of metric names the server or the dashboard needs is here."""

from __future__ import annotations

from dataclasses import dataclass

HEADLINE = "k3_kl"
"""The primary alarm series, "vllm-kl"."""

LATEST: tuple[str, ...] = (
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
"""Metrics whose latest value a run summary carries."""

NONFINITE_WATCHED: tuple[str, ...] = (
    "k3_kl",
    "ratio_dev_1e4",
    "mult_prob_error",
    "entropy",
    "grad_norm",
    "reward_mean",
    "kl_new_old",
    "ratio_mean",
    "loss",
)
"""Where a NaN or ±Inf means the run is collapsing (the default non-finite rule watches these)."""

LOG_SCALE = frozenset({"k3_kl", "reverse_k3_kl", "kl_new_old", "grad_norm"})
"""Positive metrics that span orders of magnitude: drawn on a log axis by default."""


@dataclass(frozen=True, slots=True)
class Panel:
    """A group of metrics drawn on one chart of the run page."""

    name: str
    metrics: tuple[str, ...]

    @property
    def log(self) -> bool:
        return all(m in LOG_SCALE for m in self.metrics)


PANELS: tuple[Panel, ...] = (
    Panel("vllm-kl", ("k3_kl", "reverse_k3_kl")),
    Panel("ratio drift", ("ratio_dev_1e4", "ratio_abs_dev")),
    Panel("clip rates", ("rollout_clip_rate", "clip_rate")),
    Panel("kl new/old", ("kl_new_old",)),
    Panel("entropy", ("entropy",)),
    Panel("reward", ("reward_mean",)),
    Panel("lag", ("lag",)),
    Panel("grad norm", ("grad_norm",)),
    Panel("ESS", ("ess_token", "ess_seq")),
    Panel("IS / MIS rates", ("mis_token_rate", "tis_token_rate", "mis_seq_rate")),
    Panel("prefix cache", ("prefix_cache_hit_rate",)),
)

COMPARE: tuple[str, ...] = (
    "k3_kl",
    "ratio_dev_1e4",
    "rollout_clip_rate",
    "clip_rate",
    "kl_new_old",
    "entropy",
    "reward_mean",
    "lag",
    "grad_norm",
    "mult_prob_error",
    "ess_token",
)
"""Metrics offered first when runs are overlaid."""
