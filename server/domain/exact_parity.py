"""Exact-parity runs: a run whose config records a batch-invariant or deterministic inference
mode, where the rollout engine and the trainer compute bit-identical logprobs, so the gap is
exactly 0 and any nonzero value is a regression (a kernel that lost its invariance, a weight
sync that clobbered a layer), however small.

The modes recognised, by the last component of a config key (`parity.flatten`), case apart:
vLLM's `VLLM_BATCH_INVARIANT=1` (which our rollout collector records as `batch_invariant`),
SGLang's `enable_deterministic_inference` (slime passes it as
`sglang_enable_deterministic_inference`) and its `rl_on_policy_target`, which names the trainer
backend it matches bit for bit. A value counts when it reads as on: true, 1, yes, on, or, for
`rl_on_policy_target`, any backend name.

The server records what it finds as the run label `EXACT_PARITY_LABEL` ("batch_invariant=true"),
recomputed whenever the config changes, as it does the sampler-only label; the exact-parity rule
pack selects on it (`server/alarms/configuring/correction_pack.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.domain import parity

EXACT_PARITY_LABEL = "mismatch.exact_parity"
"""The run label naming the setting that makes a run's gap exactly 0 (absent when none does)."""

SWITCHES: tuple[str, ...] = (
    "batch_invariant",
    "vllm_batch_invariant",
    "enable_batch_invariant",
    "enable_deterministic_inference",
    "sglang_enable_deterministic_inference",
    "deterministic_inference",
)
"""Leaf names (lower case) of a switch that turns an exact-parity mode on."""
TARGETS: tuple[str, ...] = ("rl_on_policy_target", "sglang_rl_on_policy_target")
"""Leaf names (lower case) whose value names the trainer backend the engine matches exactly."""
_ON = frozenset({"true", "1", "yes", "on"})
_OFF = frozenset({"", "null", "none", "false", "0", "no", "off"})


def _text(value: str) -> str:
    return value.strip().strip('"').strip().lower()


def exact_parity(config: Mapping[str, Any]) -> list[str]:
    """The exact-parity settings `config` records, as `leaf=value`, in the config's order."""
    found: dict[str, str] = {}
    for key, value in parity.flatten(config).items():
        leaf = key.rsplit(".", 1)[-1].lower()
        text = _text(value)
        on = (leaf in SWITCHES and text in _ON) or (leaf in TARGETS and text not in _OFF)
        if on and leaf not in found:
            found[leaf] = f"{leaf}={text}"
    return list(found.values())


def derived_labels(config: Mapping[str, Any]) -> dict[str, str]:
    """`EXACT_PARITY_LABEL` when the config records an exact-parity mode, else nothing."""
    settings = exact_parity(config)
    return {EXACT_PARITY_LABEL: ", ".join(settings)[:200]} if settings else {}
