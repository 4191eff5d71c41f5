"""TRL (huggingface/trl) names, read from trl/trainer/grpo_trainer.py (the GRPO trainer's
`_metrics`) and trl/trainer/utils.py (`nanstd`); `loss` and `grad_norm` come from the
transformers Trainer it builds on.

The Trainer's W&B and TensorBoard callbacks log these as "train/<name>" ("eval/<name>" for
evaluation, which stays apart). d = old log-prob minus vLLM's sampling log-prob, as ours.
"""

from __future__ import annotations

from collectors._adapters._rules import BINDING_CLIPS, Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("trl", canonical, note)


_IS_MODE = (
    "after vllm_importance_sampling_mode truncation or masking; one ratio per sequence in the "
    "sequence_* modes (the default)"
)

TABLE = table(
    "trl",
    {
        "sampling/sampling_logp_difference/mean": Rule("abs_logp_diff_mean"),
        "sampling/sampling_logp_difference/max": Rule("abs_logp_diff_max"),
        "sampling/importance_sampling_ratio/mean": _variant("ratio_mean", _IS_MODE),
        "sampling/importance_sampling_ratio/min": _variant("ratio_min", _IS_MODE),
        "sampling/importance_sampling_ratio/max": _variant("ratio_max", _IS_MODE),
        "entropy": Rule("entropy"),
        "clip_ratio/low_mean": Rule("clip_rate_low"),
        "clip_ratio/high_mean": Rule("clip_rate_high"),
        "clip_ratio/region_mean": _variant(
            "clip_rate",
            BINDING_CLIPS,
        ),
        "reward": Rule("reward_mean"),
        "reward_std": Rule("reward_std", note="sample standard deviation over sequences"),
        "completions/mean_length": Rule("response_length_mean"),
        "loss": Rule("loss"),
        "grad_norm": Rule("grad_norm"),
    },
    prefixes=("train/",),
)
