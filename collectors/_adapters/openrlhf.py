"""OpenRLHF (OpenRLHF/OpenRLHF) names, read from openrlhf/models/loss.py (PolicyLoss: vllm_kl,
clip ratio, ppo_kl), openrlhf/trainer/ray/ppo_actor.py (the actor's status dict and its
token/sample-weighted reduction), openrlhf/models/actor.py (entropy) and
openrlhf/trainer/ppo_utils/samples_generator.py (reward, response length).

Its W&B logger writes these as "train/<name>". vllm_kl is the token mean of rollout minus old
log-prob, exactly our k1.
"""

from __future__ import annotations

from collectors._adapters._rules import BINDING_CLIPS, K1_NEW_OLD, Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("openrlhf", canonical, note)


TABLE = table(
    "openrlhf",
    {
        "vllm_kl": Rule("k1_kl"),
        "ppo_kl": _variant("kl_new_old", K1_NEW_OLD),
        "ppo_clip_ratio": _variant(
            "clip_rate",
            BINDING_CLIPS,
        ),
        "entropy_loss": _variant(
            "entropy", "from logits at temperature 1, not at the rollout temperature"
        ),
        "policy_loss": Rule("loss", note="the policy term; the reference-KL loss is logged apart"),
        "actor_grad_norm": Rule("grad_norm"),
        "reward": Rule("reward_mean"),
        "response_length": Rule("response_length_mean"),
    },
    prefixes=("train/",),
)
