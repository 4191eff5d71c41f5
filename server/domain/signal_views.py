"""How views name and draw the mismatch signals (`server.domain.signals`), and their absence:
each family's common scale and how a member is put on it, the measures of the gap that no
family reads, and the sentence a view says in place of a finding for a run that logs no signal.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import TypeVar

from server.domain.signals import (
    ABS_D_TO_K3,
    CAPPED_SHORTFALL,
    RATIO,
    SEQ_RATIO_NOISE,
    VLLM_KL,
    Signal,
    strongest,
)

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Scale:
    """A family's common scale as views name it: the family, and the units of its first member."""

    family: str
    label: str
    unit: str
    log: bool


SCALES: dict[str, Scale] = {
    VLLM_KL: Scale(VLLM_KL, "vllm-kl", "k3", log=True),
    RATIO: Scale(RATIO, "ratio drift", "ratio drift ×1e4", log=False),
}
"""How a view names each family's common scale, and whether it is drawn on a log axis."""


def on_scale(signal: Signal) -> str:
    """How `signal` is put on its family's scale, in words ("as it is", "as 4·x²")."""
    return {
        "same": "as it is",
        "magnitude": "as |x|",
        "log_magnitude": "as |log x|",
        "square": f"as {ABS_D_TO_K3:g}·x²",
        "excess_square": f"as {ABS_D_TO_K3:g}·(x − 1)²",
        "deviation": "as (x − 1)·10⁴",
        "scaled_deviation": f"as (x − 1)·10⁴ / {SEQ_RATIO_NOISE:g}",
        "capped_deviation": f"as (x − 1)·10⁴ above 1, that / {CAPPED_SHORTFALL:g} below",
    }[signal.conversion]


def each_strongest(family: str, present: Mapping[K, Container[str]]) -> dict[K, Signal] | None:
    """Each key's strongest member of `family` among its names, or None when one logs none."""
    found = {key: strongest(family, names) for key, names in present.items()}
    if not found or any(s is None for s in found.values()):
        return None
    return {key: s for key, s in found.items() if s is not None}


MEASURES: dict[str, str] = {
    "prob_diff_mean": "mean |p_trainer − p_rollout| per token",
    "prob_diff_max": "largest |p_trainer − p_rollout| of a step",
    "abs_logp_diff_max": "largest |log p_trainer − log p_rollout| of a step, in nats",
    "k3_kl_max": "largest per-token k3 of a step",
    "k3_kl_p99": "99th percentile of the per-token k3 of a step",
    "prob_pearson": "Pearson correlation of p_trainer and p_rollout (1 is parity)",
    "log_ppl_abs_diff": "|log perplexity (rollout) − log perplexity (trainer)|",
    "chi2_token": "mean squared importance ratio − 1 per token",
}
"""Measures of the gap that are no family's member (max-type, or no conversion to a family's
scale): a view draws and names them, but no alarm reads them and they have no common scale."""


def measure(present: Container[str]) -> str | None:
    """The first of `MEASURES` among `present`."""
    return next((m for m in MEASURES if m in present), None)


HOW_TO_LOG = (
    "log one with the collectors (TrainerCollector writes k3_kl), or store the trainer's own "
    "name as a signal on import: --map NAME=k3_kl (or k1_kl, abs_logp_diff_mean, ratio_mean)"
)
"""How a run comes to have a mismatch signal: said wherever a view lacks one."""


def no_signal(subject: str = "This run") -> str:
    """The sentence a view says in place of a finding when `subject` logs no mismatch signal."""
    return f"{subject} logs no mismatch signal, so there is nothing to read: {HOW_TO_LOG}."
