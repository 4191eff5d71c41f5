"""prime-rl (PrimeIntellect-ai/prime-rl) names, read from src/prime_rl/trainer/rl/loss.py (the
per-token mismatch KL and the loss's masking statistics), src/prime_rl/trainer/rl/train.py (which
gathers them per step, `mismatch_kl/all` and one `mismatch_kl/<environment>` per environment
of the batch) and src/prime_rl/trainer/utils.py (a gathered tensor is logged as `<name>/mean`,
`/median`, `/std`, `/min`, `/max`).

prime-rl's mismatch KL is exp(d) - d - 1 with d = trainer minus inference log-prob: our k3,
averaged over the trainable tokens. Its `is_masked` counts tokens whose probability moved past
its trust-region bounds in the direction of the advantage's sign, not a ratio bound.
"""

from __future__ import annotations

from collectors._adapters._rules import Pattern, Rule, table, variant
from collectors._vocabulary import ENVIRONMENT


def _variant(canonical: str, note: str) -> Rule:
    return variant("prime-rl", canonical, note)


_MASK = (
    "share of tokens its DPPO trust-region mask drops (probability difference, by advantage sign)"
)

TABLE = table(
    "prime-rl",
    {
        "mismatch_kl/all/mean": Rule("k3_kl"),
        "mismatch_kl/all/max": Rule("k3_kl_max"),
        "is_masked/mean": _variant("mis_token_rate", _MASK),
        "is_masked_low/mean": _variant("mis_token_rate_low", f"{_MASK}, negative advantages"),
        "is_masked_high/mean": _variant("mis_token_rate_high", f"{_MASK}, positive advantages"),
        "entropy/all/mean": Rule("entropy"),
        "optim/grad_norm": Rule("grad_norm"),
        "loss/mean": Rule("loss"),
    },
    # each environment's mismatch KL: one metric, k3_kl, with the environment as a dimension
    patterns=(Pattern("mismatch_kl/", "/mean", "k3_kl", ENVIRONMENT, skip=("all",)),),
)
