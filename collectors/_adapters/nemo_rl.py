"""NeMo-RL (NVIDIA-NeMo/RL) names, read from nemo_rl/algorithms/loss/loss_functions.py
(ClippedPGLossFn's metrics), nemo_rl/algorithms/utils.py (calculate_kl),
nemo_rl/algorithms/grpo.py (the step's metrics and the sequence-level mult-prob error) and
nemo_rl/experience/rollouts.py (rollout metrics). The routing-replay fallback share
(`r3/routed_experts_fallback_token_route_fraction`) is computed with the generation metrics;
its own documentation says not every training loop forwards it to the logger.

NeMo-RL's logger writes these as "train/<name>". Its token metrics are global token means (each
micro-batch is normalised by the step's token count, then summed). d = prev (old) log-prob minus
generation log-prob, as ours.
"""

from __future__ import annotations

from collectors._adapters._rules import Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("nemo-rl", canonical, note)


_KL_TYPE = "with the default reference_policy_kl_type k3"

TABLE = table(
    "nemo-rl",
    {
        "gen_kl_error": Rule("k3_kl", note=_KL_TYPE),
        "policy_kl_error": Rule("reverse_k3_kl", note=_KL_TYPE),
        "token_mult_prob_error": Rule("mult_prob_error"),
        "mean_seq_mult_prob_error": Rule("mult_prob_error_seq"),
        "js_divergence_error": _variant(
            "js_div", "its k3 terms use the ratio P/M where ours use M/P (KL(M||P) estimates)"
        ),
        "sampling_importance_ratio": _variant(
            "ratio_mean",
            "after truncated-IS clamping or masking when configured; per sequence "
            "with sequence_level_importance_ratios",
        ),
        "approx_entropy": _variant(
            "entropy",
            "importance-weighted -log p of the sampled token, not the full-vocabulary entropy",
        ),
        "loss": Rule("loss"),
        "grad_norm": Rule("grad_norm"),
        "reward": Rule("reward_mean"),
        "mean_gen_tokens_per_sample": Rule("response_length_mean"),
        # its generation metrics, where the run forwards them to the logger
        "r3/routed_experts_fallback_token_route_fraction": Rule("routing_replay_fallback"),
    },
    prefixes=("train/",),
)
