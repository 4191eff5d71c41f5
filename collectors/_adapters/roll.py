"""ROLL (alibaba/ROLL) names, read from roll/utils/train_infer_corrections.py (the train–infer
statistics, logged every step whether or not a correction is applied) and roll/utils/tracking.py
(its trackers drop the `@sum` reduction tag before writing a name).

ROLL's ratio is old (recomputed) over inference log-prob, as ours, not clamped. Its
`_token_mean` is a mean over sequences of each sequence's token mean (loss_agg_mode
"seq-mean-token-mean"), hence our `_seq` forms; its `_sequence_mean` is the mean over sequences of
the sequence's product ratio. `train_infer_final_mask_mean` is the share of tokens its filters
keep: one minus it is the share they drop.
"""

from __future__ import annotations

from collectors._adapters._rules import Rule, table, variant


def _variant(canonical: str, note: str) -> Rule:
    return variant("roll", canonical, note)


TABLE = table(
    "roll",
    {
        "actor/train_infer_ratio_token_mean": (
            Rule("ratio_mean_seq"),
            Rule("ratio_dev_1e4_seq", offset=-1.0, scale=1e4),
        ),
        "actor/train_infer_ratio_sequence_mean": Rule("seq_ratio_mean"),
        "actor/is_weight_clipfrac": _variant(
            "tis_token_rate",
            "share of weights above its upper_bound, at its configured weight_type level",
        ),
        "actor/train_infer_final_mask_mean": Rule(
            "mis_token_rate@roll",
            offset=-1.0,
            scale=-1.0,
            note="one minus the share of tokens its filters keep, at its configured bounds",
        ),
    },
)
