"""RLinf (RLinf/RLinf) names, read from rlinf/algorithms/losses.py (the decoupled PPO loss:
`actor/behav_approx_kl`, `actor/behav_clip_fraction`) and
rlinf/workers/actor/embodied_fsdp_actor_worker.py (`actor/rollout_train_logprob_gap`, logged when
the embodied actor recomputes the rollout's log-probs; found in a stored version of that file,
not in the August 2026 snapshot read for the rest).

In the decoupled loss the proximal log-prob is the trainer's and the old one the rollout's:
`behav_approx_kl` is the mean of lR - lT, our k1, over the tokens whose behaviour weight stays
under its threshold; `behav_clip_fraction` is the share of tokens above it.
"""

from __future__ import annotations

from collectors._adapters._rules import Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("rlinf", canonical, note)


TABLE = table(
    "rlinf",
    {
        "actor/rollout_train_logprob_gap": Rule("abs_logp_diff_mean"),
        "actor/behav_approx_kl": _variant(
            "k1_kl", "over the tokens under its behave_weight_threshold (all tokens without one)"
        ),
        "actor/behav_clip_fraction": _variant(
            "mis_token_rate_high", "share of tokens whose behaviour weight passes its threshold"
        ),
        "actor/grad_norm": Rule("grad_norm"),
        "actor/policy_loss": Rule("loss"),
    },
)
