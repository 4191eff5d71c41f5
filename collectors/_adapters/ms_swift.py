"""ms-swift (modelscope/ms-swift) names, read from swift/rlhf_trainers/grpo_trainer.py (GRPO
`_metrics`, `_compute_rollout_offpolicy_metrics`, `_compute_is_correction_metrics`; the Megatron
trainer swift/megatron/trainers/grpo_trainer.py logs the same `rollout_correction/*`) and
swift/rl_core/advantage.py (compute_reward_metrics). `loss` and `grad_norm` come from the
transformers Trainer, whose W&B and TensorBoard callbacks log "train/<name>".
"""

from __future__ import annotations

from collectors._adapters._rules import BINDING_CLIPS, Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("ms-swift", canonical, note)


_IS_MODE = "after rollout_importance_sampling_mode truncation or masking"

TABLE = table(
    "ms-swift",
    {
        "rollout_correction/kl": Rule("k1_kl"),
        "rollout_correction/k3_kl": _variant(
            "k3_kl", "per-token k3 clamped to at most 10 before the mean"
        ),
        "rollout_correction/training_ppl": Rule("ppl_trainer"),
        "rollout_correction/rollout_ppl": Rule("ppl_rollout"),
        "rollout_correction/log_ppl_diff": Rule("log_ppl_diff"),
        "rollout_correction/log_ppl_abs_diff": Rule("log_ppl_abs_diff"),
        "rollout_correction/ppl_ratio": Rule("ppl_ratio"),
        "rollout_correction/chi2_token": Rule("chi2_token"),
        "rollout_correction/chi2_seq": _variant(
            "chi2_seq", "geometric: mean_i exp(2 mean_t d) - 1, not the sequence product"
        ),
        "rollout_correction/is_weight_mean": _variant("ratio_mean", f"mean weight {_IS_MODE}"),
        "rollout_correction/ess": _variant(
            "ess_token_clamped", f"ESS of the weights {_IS_MODE}, then clamped to [1/C, C]"
        ),
        "entropy/mean": _variant(
            "entropy", "mean over completions of each completion's token mean"
        ),
        "clip_ratio/low_mean": Rule("clip_rate_low"),
        "clip_ratio/high_mean": Rule("clip_rate_high"),
        "clip_ratio/region_mean": _variant(
            "clip_rate",
            BINDING_CLIPS,
        ),
        "reward": Rule("reward_mean"),
        "reward_std": _variant(
            "reward_std", "mean of the per-prompt-group standard deviations (scale_rewards=group)"
        ),
        "completions/mean_length": Rule("response_length_mean"),
        "loss": Rule("loss"),
        "grad_norm": Rule("grad_norm"),
    },
    prefixes=("train/",),
)
