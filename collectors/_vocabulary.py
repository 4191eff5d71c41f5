"""The canonical metric names of METRICS.md, as the collectors know them.

A name here is one the dashboard, the default alarms or a diagnosis may read; the server stores
any other name too, but nothing reads it. The collectors keep this list themselves (they import
nothing of the server); the tests check it against what `compute_step_metrics` and the rollout
collector emit and against every framework table's targets.
"""

from __future__ import annotations

from collectors._metrics import SEQ_FORMS

_HEADLINE = (*SEQ_FORMS, "ratio_dev_1e4")
"""Headline scalars: each also comes as a mean over sequences, under `<name>_seq`."""

_TRAINER = (
    "k3_kl_max",
    "k3_kl_p99",
    "ratio_std",
    "ratio_min",
    "ratio_max",
    "abs_logp_diff_max",
    "abs_logp_diff_std",
    "prob_diff_max",
    "prob_pearson",
    "chi2_token",
    "chi2_seq",
    "ppl_trainer",
    "ppl_rollout",
    "log_ppl_diff",
    "log_ppl_abs_diff",
    "ppl_ratio",
    "rollout_clip_rate",
    "clip_rate",
    "clip_rate_low",
    "clip_rate_high",
    "kl_new_old",
    "entropy",
    "kl_entropy_ratio",
    "lag",
    "lag_max",
    "stale_fraction",
    "reward_mean",
    "reward_std",
    "grad_norm",
    "loss",
    "tokens",
    "sequences",
    "nonfinite_tokens",
    # not in METRICS.md: generated tokens per sequence averaged over sequences, which several
    # frameworks log and their tables map (collectors._adapters)
    "response_length_mean",
)

_CORRECTION = (
    "tis_token_rate",
    "mis_token_rate",
    "mis_token_rate_low",
    "mis_token_rate_high",
    "tis_seq_rate",
    "mis_seq_rate",
    "geo_mis_seq_rate",
    "veto_token_rate",
    "veto_seq_rate",
    "ess_token",
    "ess_token_clamped",
    "ess_seq",
    "seq_ratio_mean",
    "seq_ratio_max",
    "seq_log_ratio_abs_max",
)

_ROLLOUT = (
    "rollout_tokens",
    "rollout_sequences",
    "rollout_logprob_mean",
    "prefix_cache_hit_rate",
    "finish_stop_rate",
    "finish_length_rate",
    "weight_version",
    "weight_update_seconds",
    "generation_tokens_per_s",
)

CANONICAL: frozenset[str] = frozenset(
    (*_HEADLINE, *(f"{name}_seq" for name in _HEADLINE), *_TRAINER, *_CORRECTION, *_ROLLOUT)
)
"""Every canonical metric name."""
