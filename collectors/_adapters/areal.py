"""AReaL (inclusionAI/AReaL) names, read from areal/trainer/ppo/actor.py (what the PPO actor
hands its stats tracker under the `ppo_actor` and `update` scopes),
areal/utils/functional/functional.py (the decoupled loss: `behave_imp_weight`,
`behave_approx_kl`, and the rejection-sampling `filtered_fraction`) and
areal/utils/stats_tracker.py (a tensor statistic is logged as `<name>/avg`, `/min`, `/max`).

AReaL's proximal log-prob is the trainer's, its old log-prob the rollout engine's: its
`behave_approx_kl` is d = lT - lR per token, the negative of our k1. Both behave statistics are
averaged over the tokens its behaviour-weight cap keeps (`unclipped_behave_tokens`), so they
are variants: equal to ours on a run that caps nothing.
"""

from __future__ import annotations

from collectors._adapters._rules import Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("areal", canonical, note)


_KEPT = "over the tokens its behave_imp_weight_cap keeps"

TABLE = table(
    "areal",
    {
        "behave_approx_kl/avg": Rule(
            "k1_kl@areal", scale=-1.0, note=f"mean of lR - lT (its value negated) {_KEPT}"
        ),
        "behave_imp_weight/avg": _variant("ratio_mean", f"mean importance weight {_KEPT}"),
        "behave_imp_weight/max": _variant("ratio_max", f"largest weight {_KEPT}"),
        "behave_imp_weight/min": _variant("ratio_min", f"smallest weight {_KEPT}"),
        "rs_filtered_fraction": _variant(
            "mis_token_rate", "share of tokens its rejection sampling masks or clamps"
        ),
        "entropy/avg": Rule("entropy", note="token mean over the valid tokens"),
        "grad_norm": Rule("grad_norm"),
        # rollout routing replay for MoE models; names from AReaL's routing-replay work, not
        # found in the snapshot of its main branch read for the rest
        "r3/replay_fraction_active": Rule("routing_replay_active"),
        "r3/routing_valid_fraction": Rule("routing_replay_valid"),
    },
    prefixes=("ppo_actor/update/", "ppo_actor/"),
)
