"""The MoE pack: the vllm-kl ceilings for runs whose config records a mixture-of-experts model
(label `mismatch.moe`, `server/domain/moe.py`), which the dense ceilings of the default and
severity packs leave alone (their label filter is `!mismatch.moe`).

| rule | kind | on | fires when |
|---|---|---|---|
| vllm-kl high (MoE) | threshold | vllm-kl signal, MoE runs | above 0.3 for 5 steps |
| vllm-kl far beyond (MoE) | threshold | vllm-kl signal, MoE runs | above 1.0, 8 steps (critical) |

The relative rules (spike, rise, precursor) judge a run against its own history, so they watch
MoE runs unchanged; only the absolute ceilings need MoE levels.
"""

from __future__ import annotations

from typing import Any

from server.domain import signals
from server.domain.moe import MOE_LABEL

NOT_MOE = f"!{MOE_LABEL}"
"""The label filter of the dense ceilings: every run but an MoE one."""

MOE_HIGH_WHY = """The healthy vllm-kl (k3) the field reports for MoE models is 1e-3 … 1e-1, a
hundred times the dense 1e-5 … 1e-3 (the LMSYS write-up on training–inference mismatch): the
rollout engine and the trainer route about a tenth of their router decisions differently, and
rollout routing replay narrows that without reaching dense levels. The dense ceiling (0.02)
would fire on healthy MoE steps. 0.3 sits three times above the top of the healthy MoE range, and
is where the typical token leaves what a correction keeps: k3 ≈ E[d²]/2 for a small log-ratio d,
so k3 = 0.3 is an rms |d| near 0.77, a probability ratio of about 2.2 — outside the [1/2, 2]
bounds of verl's and IcePop's masks. Five steps, as the dense ceiling holds."""

MOE_FAR_WHY = """Critical: k3 above 1.0 (an rms log-ratio near 1.4, probabilities off by a
factor of about 4 on the typical token) for 8 steps, ten times the top of the healthy MoE range
and past the level at which MoE runs without routing replay were reported to collapse. It joins
the run's open incident and raises it, as the dense "far beyond" rule does."""

MOE_PACK: list[dict[str, Any]] = [
    {
        "name": "vllm-kl high (MoE)",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": MOE_LABEL,
        "severity": "warning",
        "params": {"threshold": 0.3, "direction": "above", "for_steps": 5},
    },
    {
        "name": "vllm-kl far beyond (MoE)",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": MOE_LABEL,
        "severity": "critical",
        "params": {"threshold": 1.0, "direction": "above", "for_steps": 8},
    },
]
"""The vllm-kl ceilings at MoE levels, for runs labelled `mismatch.moe`."""

WHY: dict[str, str] = {
    "vllm-kl high (MoE)": MOE_HIGH_WHY,
    "vllm-kl far beyond (MoE)": MOE_FAR_WHY,
}
