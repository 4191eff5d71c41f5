"""The metric vocabulary of the collectors: every canonical name of METRICS.md, its forms, and the
constants the definitions share.

A name here is one the dashboard, the default alarms or a diagnosis may read; the server stores
any other name too, but nothing reads it. This is the one place the collectors write these names
down: the metrics (`_metrics`, `_pure`), the metric map and the tests import them from here, and
this module imports nothing, so that any module of the collectors can. (The collectors import
nothing of the server either, which keeps a vocabulary of its own; the tests check that every
name the server reads is one of these.)

The groups follow METRICS.md's tables; a step's metrics are `STEP` when every optional input is
given, `PLAIN_PYTHON` on a host without NumPy and torch.
"""

from __future__ import annotations

from collections.abc import Iterable

# -- constants of the definitions ---------------------------------------------------------------

CLAMP = 20.0
"""|d| bound before any exp (verl, slime, SkyRL)."""
VETO_LOW = 1e-4
"""A token ratio below this vetoes its sequence (and counts in `veto_token_rate`)."""
VETO_HIGH = 100.0
"""A token ratio above this vetoes its sequence."""
DEFAULT_EDGES: tuple[float, ...] = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0)
"""Probability-bucket edges on pR = exp(lR): 7 buckets."""
BUCKET_COLUMNS = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
"""The columns of a bucket table: sums, so that tables of several actors or steps add up."""

# -- forms -----------------------------------------------------------------------------------

SEQ_SUFFIX = "_seq"


def seq_form(name: str) -> str:
    """The name of a headline scalar's mean over sequences (of each sequence's token mean)."""
    return name + SEQ_SUFFIX


def both_forms(names: Iterable[str]) -> tuple[str, ...]:
    """Each name as a token mean (the bare name) and as a mean over sequences."""
    names = tuple(names)
    return (*names, *(seq_form(name) for name in names))


# -- the trainer side: what compute_step_metrics emits ---------------------------------------

PER_TOKEN = (
    "k1_kl",
    "k2_kl",
    "k3_kl",
    "reverse_k3_kl",
    "ratio_mean",
    "ratio_abs_dev",
    "abs_logp_diff_mean",
    "mult_prob_error",
    "prob_diff_mean",
    "js_div",
)
"""Token means of a per-token quantity; each is a headline scalar."""
HEADLINE = (*PER_TOKEN, "ratio_dev_1e4")
"""Headline scalars, emitted in both forms (verl and TRL use the token mean, slime and PipelineRL
the mean over sequences)."""
TOKEN_STATS = (
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
    "rollout_clip_rate",
)
"""Statistics over the step's tokens, in one form."""
SEQUENCE = (
    "chi2_seq",
    "ppl_trainer",
    "ppl_rollout",
    "log_ppl_diff",
    "log_ppl_abs_diff",
    "ppl_ratio",
)
"""Statistics over the step's sequences (those with a valid token)."""
CORRECTION = (
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
"""Importance-sampling correction diagnostics."""
UPDATE_NEW = ("kl_new_old", "clip_rate")
"""Given the new policy's logprobs."""
UPDATE_ADVANTAGES = ("clip_rate_low", "clip_rate_high")
"""Given the new policy's logprobs and the advantages."""
UPDATE_ENTROPY = ("entropy", "kl_entropy_ratio")
"""Given the entropy."""
COUNTS = ("tokens", "sequences", "nonfinite_tokens")
"""Valid tokens, sequences with a valid token, valid tokens with a non-finite logprob."""
EMPTY_STEP = ("tokens", "sequences")
"""All that a step with no valid token reports (both 0): nothing else is defined."""

STEP = (
    *both_forms(HEADLINE),
    *TOKEN_STATS,
    *SEQUENCE,
    *CORRECTION,
    *UPDATE_NEW,
    *UPDATE_ADVANTAGES,
    *UPDATE_ENTROPY,
    *COUNTS,
)
"""Every name compute_step_metrics emits when given every optional input."""
PLAIN_PYTHON = (
    *both_forms(HEADLINE),
    "k3_kl_max",
    "ratio_std",
    "ratio_min",
    "ratio_max",
    "abs_logp_diff_max",
    *COUNTS,
)
"""What the plain-Python path (`_pure`, no NumPy and no torch) emits."""

# -- passed through from the trainer, and the rollout side -----------------------------------

PASSED_THROUGH = (
    "lag",
    "lag_max",
    "stale_fraction",
    "reward_mean",
    "reward_std",
    "grad_norm",
    "loss",
    # not in METRICS.md: generated tokens per sequence averaged over sequences, which several
    # frameworks log and their tables map (collectors._adapters)
    "response_length_mean",
)
"""Training signals the trainer logs and the alarms read."""
ROLLOUT = (
    "rollout_tokens",
    "rollout_sequences",
    "rollout_logprob_mean",
    "rollout_ppl",
    "prefix_cache_hit_rate",
    "finish_stop_rate",
    "finish_length_rate",
    "weight_version",
    "weight_update_seconds",
    "generation_tokens_per_s",
)
"""What the rollout collector (collectors._vllm) emits, besides `lag`."""

ENVIRONMENT = "env"
"""The dimension a per-environment (or per-task) value carries: prime-rl logs its mismatch KL per
environment of the batch."""


def dimensioned(name: str, dimension: str, value: str) -> str:
    """One metric with a dimension, as it is stored: `k3_kl{env=gsm8k}`. The server reads the
    same spelling (`server.domain.metrics.split_dimension`; a test keeps the two equal)."""
    return f"{name}{{{dimension}={value}}}"


ROUTING = ("routing_replay_active", "routing_replay_valid", "routing_replay_fallback")
"""MoE rollout routing replay (R3), passed through from the trainer: the share of the step's
router micro-batches (or layers) that replayed the rollout's routes, the share of replayed
routes that were valid, and the share of token routes that fell back to the trainer's own
router. Healthy replay reads 1, 1 and 0."""

CANONICAL: frozenset[str] = frozenset((*STEP, *PASSED_THROUGH, *ROLLOUT, *ROUTING))
"""Every canonical metric name."""
