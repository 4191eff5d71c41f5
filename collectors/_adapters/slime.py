"""slime (THUDM/slime) names, read from slime/backends/megatron_utils/loss.py
(policy_loss_function, vanilla_tis_function), examples/train_infer_mismatch_helper/mis.py (the
`mis_*` metrics of its custom TIS function), slime/backends/megatron_utils/model.py
(`train/grad_norm`), slime/observability/rollout_metrics.py and train_metric_utils.py
(`rollout/*`).

slime logs these names with their "train/" and "rollout/" prefixes. Its loss metrics are averaged
per rollout (one sample each in single-turn runs): sequence means, hence our `_seq` forms. With
--calculate-per-token-loss they become token means and these `_seq` mappings no longer hold.
"""

from __future__ import annotations

from collectors._adapters._rules import BINDING_CLIPS, K1_NEW_OLD, Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("slime", canonical, note)


TABLE = table(
    "slime",
    {
        "train/train_rollout_logprob_abs_diff": Rule("abs_logp_diff_mean_seq"),
        # The sequence mean of the raw ratio also gives the parity deviation exactly.
        "train/tis": (
            Rule("ratio_mean_seq"),
            Rule("ratio_dev_1e4_seq", offset=-1.0, scale=1e4),
        ),
        "train/tis_abs": Rule("ratio_abs_dev_seq"),
        "train/mis_kl": Rule("k1_kl_seq"),
        "train/mis_k3_kl": Rule("k3_kl_seq"),
        "train/mis_training_ppl": Rule("ppl_trainer"),
        "train/mis_rollout_ppl": Rule("ppl_rollout"),
        "train/mis_log_ppl_diff": Rule("log_ppl_diff"),
        "train/mis_log_ppl_abs_diff": Rule("log_ppl_abs_diff"),
        "train/mis_ppl_ratio": Rule("ppl_ratio"),
        "train/mis_chi2_seq": Rule("chi2_seq"),
        "train/mis_chi2_token": _variant(
            "chi2_token", "mean over sequences of each sequence's E[r^2] - 1"
        ),
        "train/mis_tis_weight_before_bound": _variant(
            "ratio_mean_seq",
            "the IS weight at the configured tis_level (token, sequence or "
            "geometric); ratio_mean_seq at token level only",
        ),
        "train/loss": Rule("loss"),
        "train/grad_norm": Rule("grad_norm"),
        "train/entropy_loss": _variant(
            "entropy", "mean over sequences of each sequence's token mean"
        ),
        "train/pg_clipfrac": _variant("clip_rate", f"{BINDING_CLIPS}, averaged per sequence"),
        "train/ppo_kl": _variant("kl_new_old", f"{K1_NEW_OLD}, averaged per sequence"),
        "rollout/raw_reward": Rule("reward_mean"),
        "rollout/response_len/mean": Rule("response_length_mean"),
    },
)
