"""SkyRL (NovaSky-AI/SkyRL) names, read from skyrl/train/trainer.py (the forward pass's
`policy/rollout_train_logprobs_abs_diff_*`, over the loss mask's tokens),
skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py (the off-policy correction's
statistics, present only while a correction is configured) and
skyrl/backends/skyrl_train/workers/worker.py (which files the loss function's metrics under
`loss_metrics/`; the trainer puts `policy/` in front of every worker status).

d is the old (recomputed) log-prob minus the rollout's, as ours, clamped at ±20 before the exp.
Micro-batch values are averaged into the step's (a `_max` key takes the largest), a reduction
the module docstring of the package accepts as theirs.

`policy/rollout_train_prob_diff_{mean,std}`, which public write-ups quote, are not in SkyRL's
source as read: no rule maps them, and they are stored under their own names.
"""

from __future__ import annotations

from collectors._adapters._rules import Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("skyrl", canonical, note)


_CORRECTION = "policy/loss_metrics/"
_THRESHOLD = "at its configured thresholds, not ours"

TABLE = table(
    "skyrl",
    {
        "policy/rollout_train_logprobs_abs_diff_mean": Rule("abs_logp_diff_mean"),
        "policy/rollout_train_logprobs_abs_diff_max": Rule("abs_logp_diff_max"),
        "policy/rollout_train_logprobs_abs_diff_std": _variant(
            "abs_logp_diff_std", "the sample (n - 1) standard deviation of |d|"
        ),
        f"{_CORRECTION}is_ratio_mean": Rule("ratio_mean"),
        f"{_CORRECTION}is_ratio_max": Rule("ratio_max"),
        f"{_CORRECTION}is_ratio_std": _variant(
            "ratio_std", "std over every position of the batch, masked ones counted as 0"
        ),
        f"{_CORRECTION}tis_token_clip_high_ratio": _variant(
            "tis_token_rate", f"share of tokens above token_tis_ratio_clip_high, {_THRESHOLD}"
        ),
        f"{_CORRECTION}tis_seq_clip_high_ratio": _variant(
            "tis_seq_rate", f"share of sequences above sequence_tis_ratio_clip_high, {_THRESHOLD}"
        ),
        f"{_CORRECTION}token_mask_ratio": _variant(
            "mis_token_rate", f"share of tokens its token mask drops, {_THRESHOLD}"
        ),
        f"{_CORRECTION}outlier_seq_masked_ratio": _variant(
            "veto_seq_rate",
            f"share of sequences with a token outside its outlier bounds, {_THRESHOLD}",
        ),
        f"{_CORRECTION}product_sequence_mask_masked_ratio": _variant(
            "mis_seq_rate",
            f"share of sequences whose product ratio leaves its bounds, {_THRESHOLD}",
        ),
        f"{_CORRECTION}geo_sequence_mask_masked_ratio": _variant(
            "geo_mis_seq_rate",
            f"share of sequences whose geometric ratio leaves its bounds, {_THRESHOLD}",
        ),
    },
)
