"""Rule packs for what the default pack does not watch: how a run's importance-sampling
correction fares, runs whose config promises an exact-parity gap of 0, and MoE routing
replay.

| rule | kind | on | fires when |
|---|---|---|---|
| IS effective sample size low | threshold | ESS signal | below 0.3 for 5 steps |
| correction masks many tokens | threshold | masked-share signal | above 0.1 for 5 steps |
| correction going blind | diverging | vllm-kl up, masked share down | see `BLIND_WHY` |
| nonzero mismatch (exact parity) | threshold | vllm-kl signal, exact-parity runs | above 0 |
| ratio off 1 (exact parity) | threshold | \\|ratio signal\\|, exact-parity runs | above 0 |
| routing replay off or degraded | threshold | replay active / valid share | below 0.9, 3 steps |
| routing replay falling back | threshold | routing_replay_fallback | above 0.05, 3 steps |

The first three read trainer records; the exact-parity rules, critical, fire on one step of a
run labelled `mismatch.exact_parity` (`server/domain/exact_parity.py`).

The correction rules read the correction-health families of `server/domain/signals.py` (ESS,
masked share), each series through the strongest member it logs, in the member's own units.
"""

from __future__ import annotations

from typing import Any

from server.domain import signals
from server.domain.exact_parity import EXACT_PARITY_LABEL

ESS_WHY = """verl's documentation looks at a correction whose normalised effective sample size
falls below 0.3 (as example code, not an alarm): the weighted gradient then rests on fewer than
a third of the batch's tokens. Healthy runs sit near 1 (a token k3 of 1e-2 leaves the ESS of the
weights near 0.98, since 1/ESS − 1 is the weights' variance, about 2·k3); 0.3 means the weights'
variance is above 2, a gap of k3 ≈ 1. Five steps in a row so one batch of odd prompts does not
page."""

MASKED_WHY = """A mask or rejection that drops a tenth of the trainable tokens is no longer a
correction at the margin: the update is learning from a filtered batch, and which tokens the
mask drops (low-probability ones, where the gap is largest) is a bias of its own. Healthy runs
at verl's and IcePop's [1/2, 2] bounds mask well under 1% (a token needs |d| > 0.69); 10% for
five steps is far outside that."""

BLIND_WHY = """A correction going blind: as training goes on, the share of tokens the mask drops
falls while the gap it corrects widens (the failure a follow-up to IcePop reports), because the
tokens that carry the gap no longer cross the mask's bounds or the bounds were set for an earlier
gap. Neither signal alone says so: a rising gap with a rising mask is the correction working, a
falling mask with a flat gap is a run getting healthier. The gap's rise is the vllm-kl rise
rule's test (median of 7 steps 2.5 robust σ above the 100 before, in log space); the mask's fall
a value below half its trailing 50-step median; the two within 50 steps of each other."""

EXACT_WHY = """A run whose config records a batch-invariant or deterministic mode (vLLM's
VLLM_BATCH_INVARIANT=1, SGLang's deterministic inference or rl_on_policy_target) computes the same
logprobs in the engine and in the trainer, bit for bit: its gap is exactly 0 at every step.
Any nonzero value — one step, however small — is a regression (a kernel that lost its
invariance, a weight sync that left a layer stale), so the level is 0 and one step fires it,
at critical severity: the run is no longer what its config promises. Runs without the label
are never judged by it."""

CORRECTION_PACK: list[dict[str, Any]] = [
    {
        "name": "IS effective sample size low",
        "kind": "threshold",
        "metric": signals.ESS,
        "source": "trainer",
        "severity": "warning",
        "params": {"threshold": 0.3, "direction": "below", "for_steps": 5},
    },
    {
        "name": "correction masks many tokens",
        "kind": "threshold",
        "metric": signals.MASKED,
        "source": "trainer",
        "severity": "warning",
        "params": {"threshold": 0.1, "direction": "above", "for_steps": 5},
    },
    {
        "name": "correction going blind",
        "kind": "diverging",
        "metric": signals.VLLM_KL,
        "source": "trainer",
        "severity": "warning",
        "params": {
            "trigger_metric": signals.VLLM_KL,
            "follow": [signals.MASKED],
            "short": 7,
            "long": 100,
            "warmup": 30,
            "z": 2.5,
            "floor": 2e-5,
            "relative_below": 0.5,
            "window": 50,
            "min_history": 20,
            "within_steps": 50,
            "for_steps": 3,
        },
    },
]
"""Rules on how a run's importance-sampling correction fares."""

EXACT_PARITY_PACK: list[dict[str, Any]] = [
    {
        "name": "nonzero mismatch (exact parity)",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": EXACT_PARITY_LABEL,
        "severity": "critical",
        "params": {"threshold": 0.0, "abs": True, "direction": "above", "for_steps": 1},
    },
    {
        "name": "ratio off 1 (exact parity)",
        "kind": "threshold",
        "metric": signals.RATIO,
        "label": EXACT_PARITY_LABEL,
        "severity": "critical",
        "params": {"threshold": 0.0, "abs": True, "direction": "above", "for_steps": 1},
    },
]
"""Rules for runs labelled with an exact-parity mode."""

REPLAY_WHY = """MoE rollout routing replay makes the trainer use the experts the rollout engine
chose: without it about 10% of routers disagree per forward pass, most tokens differ in at least
one layer, and runs collapsed. A healthy replay reads 1 (every router pass replayed, every route
valid) and its fallback 0, so a replay that switches off or degrades is a drop, not a drift:
below 0.9 (or a fallback above 5% of token routes) for 3 steps means a tenth of the routing is
live again, where the gap the replay removes comes back."""

ROUTING_PACK: list[dict[str, Any]] = [
    {
        "name": "routing replay off or degraded",
        "kind": "threshold",
        "metric": signals.REPLAY,
        "severity": "warning",
        "params": {"threshold": 0.9, "direction": "below", "for_steps": 3},
    },
    {
        "name": "routing replay falling back",
        "kind": "threshold",
        "metric": "routing_replay_fallback",
        "severity": "warning",
        "params": {"threshold": 0.05, "direction": "above", "for_steps": 3},
    },
]
"""Rules for MoE runs that log their routing replay."""

PACKS: dict[str, list[dict[str, Any]]] = {
    "correction-health": CORRECTION_PACK,
    "exact-parity": EXACT_PARITY_PACK,
    "routing-replay": ROUTING_PACK,
}
"""These packs by receipt name, for `server.alarms.configuring.defaults.PACKS`."""

WHY: dict[str, str] = {
    "IS effective sample size low": ESS_WHY,
    "correction masks many tokens": MASKED_WHY,
    "correction going blind": BLIND_WHY,
    "nonzero mismatch (exact parity)": EXACT_WHY,
    "ratio off 1 (exact parity)": EXACT_WHY,
    "routing replay off or degraded": REPLAY_WHY,
    "routing replay falling back": REPLAY_WHY,
}
