"""verl (volcengine/verl) names, read from its source:

- verl/trainer/ppo/rollout_corr_helper.py — `rollout_corr/*`: off-policy diagnostics
  (compute_offpolicy_metrics), importance weights (compute_is_metrics) and rejection-sampling
  statistics (compute_rs_metrics). d = old/current log-prob minus rollout log-prob, as ours.
- verl/utils/debug/metrics.py — `training/*`: probability differences and their correlation.
- verl/trainer/ppo/core_algos.py, verl/workers/actor/dp_actor.py — `actor/*`.
- verl/trainer/ppo/metric_utils.py — `critic/*`, `response_length/*`.

verl logs without a prefix. The actor recomputes `rollout_corr/*` with the policy being updated
and averages them over micro-batches; the trainer's own copy (old policy) is overwritten by it.
"""

from __future__ import annotations

from collectors._adapters._rules import BINDING_CLIPS, K1_NEW_OLD, Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("verl", canonical, note)


_IS_LEVEL = "at the configured rollout_is level (token or sequence)"

TABLE = table(
    "verl",
    {
        "rollout_corr/kl": Rule("k1_kl"),
        "rollout_corr/k3_kl": Rule("k3_kl"),
        "rollout_corr/training_ppl": Rule("ppl_trainer"),
        "rollout_corr/rollout_ppl": Rule("ppl_rollout"),
        "rollout_corr/log_ppl_diff": Rule("log_ppl_diff"),
        "rollout_corr/log_ppl_abs_diff": Rule("log_ppl_abs_diff"),
        "rollout_corr/ppl_ratio": Rule("ppl_ratio"),
        "rollout_corr/chi2_token": Rule("chi2_token"),
        "rollout_corr/chi2_seq": Rule("chi2_seq"),
        # Rejection-sampling statistics exist only for the rollout_rs options chosen; the
        # off-policy diagnostics above come first where both give the same canonical name.
        "rollout_corr/rollout_rs_token_k1_mean": Rule("k1_kl"),
        "rollout_corr/rollout_rs_token_k2_mean": Rule("k2_kl"),
        "rollout_corr/rollout_rs_token_k3_mean": Rule("k3_kl"),
        "rollout_corr/rollout_rs_token_k3_max": Rule("k3_kl_max"),
        "rollout_corr/rollout_rs_token_k1_seq_mean": Rule("k1_kl_seq"),
        "rollout_corr/rollout_rs_token_k2_seq_mean": Rule("k2_kl_seq"),
        "rollout_corr/rollout_rs_token_k3_seq_mean": Rule("k3_kl_seq"),
        "rollout_corr/rollout_rs_seq_mean_k1_seq_mean": Rule("k1_kl_seq"),
        "rollout_corr/rollout_rs_seq_mean_k2_seq_mean": Rule("k2_kl_seq"),
        "rollout_corr/rollout_rs_seq_mean_k3_seq_mean": Rule("k3_kl_seq"),
        # Importance-weight statistics are ours only at token level, and the level is a setting
        # with no default, so they stay apart.
        "rollout_corr/rollout_is_mean": _variant("ratio_mean", f"mean weight {_IS_LEVEL}"),
        "rollout_corr/rollout_is_max": _variant("ratio_max", f"largest weight {_IS_LEVEL}"),
        "rollout_corr/rollout_is_min": _variant("ratio_min", f"smallest weight {_IS_LEVEL}"),
        "rollout_corr/rollout_is_std": _variant(
            "ratio_std", f"std of the weights clamped to [1/C, C], {_IS_LEVEL}"
        ),
        "rollout_corr/rollout_is_eff_sample_size": _variant(
            "ess_token_clamped", f"ESS of the weights clamped to [1/C, C], {_IS_LEVEL}"
        ),
        "rollout_corr/rollout_is_ratio_fraction_high": _variant(
            "tis_token_rate", f"share of weights above C, {_IS_LEVEL}"
        ),
        "rollout_corr/rollout_is_ratio_fraction_low": _variant(
            "mis_token_rate_low", f"share of weights below 1/C, {_IS_LEVEL}"
        ),
        # What its rejection sampling dropped, at the bounds its options set.
        "rollout_corr/rollout_rs_masked_fraction": _variant(
            "mis_token_rate", "share of tokens its rejection sampling masks, at its bounds"
        ),
        "rollout_corr/rollout_rs_seq_masked_fraction": _variant(
            "mis_seq_rate", "share of sequences its rejection sampling rejects, at its bounds"
        ),
        "training/rollout_probs_diff_mean": Rule("prob_diff_mean"),
        "training/rollout_probs_diff_max": Rule("prob_diff_max"),
        "training/rollout_actor_probs_pearson_corr": Rule("prob_pearson"),
        "actor/entropy": Rule("entropy", note="token mean with the default loss_agg_mode"),
        "actor/grad_norm": Rule("grad_norm"),
        "actor/pg_loss": Rule("loss", note="the policy-gradient term; kl_loss is logged apart"),
        "actor/pg_clipfrac": _variant(
            "clip_rate",
            BINDING_CLIPS,
        ),
        "actor/ppo_kl": _variant("kl_new_old", K1_NEW_OLD),
        "critic/score/mean": Rule("reward_mean"),
        "response_length/mean": Rule("response_length_mean"),
    },
)
