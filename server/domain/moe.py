"""Mixture-of-experts runs: a run whose config records an MoE model is judged against MoE
levels of the gap, not dense ones.

Why a level of its own: the rollout engine and the trainer route each token to its experts
separately, and about 10% of router decisions differ between the two forward passes, so most
tokens meet at least one layer where they went to different experts. The healthy vllm-kl (k3)
the field reports is 1e-5 … 1e-3 on dense models and 1e-3 … 1e-1 on MoE models (the LMSYS
write-up on training–inference mismatch; `METRICS.md`); rollout routing replay (R3) narrows it
but does not bring MoE to dense levels. A dense ceiling (0.02) on an MoE run fires on healthy
steps and teaches the on-call person to mute it; the MoE pack
(`server/alarms/configuring/moe_pack.py`) watches those runs at their own levels and the
dense rules leave them (`!mismatch.moe`).

Recognised, by the last component of a config key (`parity.flatten`), case apart:
- an expert count above 1 (`num_experts`, `num_local_experts`, `n_routed_experts`,
  `moe_num_experts`, Megatron's `num_moe_experts`), or expert parallelism above 1
  (`expert_model_parallel_size`, which only an MoE model has);
- a number of experts per token (`num_experts_per_tok`, `moe_router_topk`, `moe_topk`);
- a model type or architecture that names an MoE family (`qwen3_moe`, `Qwen3MoeForCausalLM`,
  `mixtral`, `deepseek_v3`, `dbrx`, `gpt_oss`);
- most often, since a trainer's config records the model's path and not its architecture, the
  policy model's path or name (not a data or checkpoint path, not a reward model's) naming an
  MoE release: `Qwen3-30B-A3B` (an active-parameter suffix),
  `Mixtral-8x7B`, `DeepSeek-V3`, `gpt-oss-20b`, `OLMoE`, `Kimi-K2`, `GLM-4.5`, `Qwen3-Next`
  (distilled dense models such as `DeepSeek-R1-Distill-Qwen-7B` are not).
Whether the run replays the rollout's routes is read too — a switch (`routing_replay`,
`router_replay`, `enable_routing_replay`, `use_routing_replay`, `r3`) or verl's
`router_replay.mode` (`R2`, `R3`; `disabled` is off) — and shown in the label's value, so a
reader sees "MoE with replay" at a glance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from server.domain import parity

MOE_LABEL = "mismatch.moe"
"""The run label naming the config settings that make the run an MoE one (absent for dense)."""

COUNTS: tuple[str, ...] = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_moe_experts",
    "expert_model_parallel_size",
)
"""Leaf names (lower case) of an expert count (or expert parallelism): MoE when above 1."""
PER_TOKEN: tuple[str, ...] = ("num_experts_per_tok", "moe_router_topk", "moe_topk")
"""Leaf names (lower case) of the experts each token is routed to: MoE when above 0."""
FAMILIES: tuple[str, ...] = ("moe", "mixtral", "deepseek_v2", "deepseek_v3", "dbrx", "gpt_oss")
"""Substrings of a `model_type` or an architecture name (lower case) that name an MoE family."""
NAMED_BY: tuple[str, ...] = ("model_type", "architectures", "architecture")
RELEASES = re.compile(
    r"moe|mixtral|deepseek-v[23]|deepseek-r1|gpt-oss|kimi-k2|glm-4\.[56]|qwen3-next"
    r"|\d+x\d+b|-a\d+(\.\d+)?b(\b|_|-)"
)
"""Names of MoE releases, as a model path or name spells them (lower case)."""
DENSE_RELEASES = re.compile(r"distill")
"""Dense models named after an MoE one (DeepSeek-R1's distillations)."""
REPLAY: tuple[str, ...] = (
    "routing_replay",
    "router_replay",
    "enable_routing_replay",
    "use_routing_replay",
    "moe_routing_replay",
    "r3",
)
"""Leaf names (lower case) of a switch that turns rollout routing replay on."""
_ON = frozenset({"true", "1", "yes", "on"})
_OFF = frozenset({"", "null", "none", "false", "0", "no", "off", "disabled", "disable"})


def _names_a_model(key: str, leaf: str) -> bool:
    """Does the setting at `key` name the policy's model? A model path or name does (verl's
    `model.path`, TRL's `model_name_or_path`, OpenRLHF's `pretrain`); a data or checkpoint
    path does not, nor a reward model or judge, which may well be an MoE beside a dense policy."""
    if any(other in key for other in ("reward", "judge")):
        return False
    return "model" in leaf or leaf == "pretrain" or (leaf in ("path", "name") and "model" in key)


def _text(value: str) -> str:
    return value.strip().strip('"').strip().lower()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _says_moe(key: str, leaf: str, text: str) -> bool:
    number = _number(text)
    if leaf in COUNTS:
        return number is not None and number > 1
    if leaf in PER_TOKEN:
        return number is not None and number > 0
    if leaf in NAMED_BY:
        return any(family in text for family in FAMILIES)
    if _names_a_model(key, leaf):
        return RELEASES.search(text) is not None and DENSE_RELEASES.search(text) is None
    return False


def _says_replay(key: str, leaf: str, text: str) -> bool:
    if leaf in REPLAY:
        return text in _ON
    in_replay = any(name in key for name in ("router_replay", "routing_replay"))
    return in_replay and leaf in ("mode", "enable", "enabled") and text not in _OFF


def moe(config: Mapping[str, Any]) -> list[str]:
    """The settings in `config` that make the run an MoE one, as `leaf=value`, in the config's
    order, followed by `routing_replay=on` when a replay switch is on; empty for a dense run."""
    found: dict[str, str] = {}
    replay = False
    for key, value in parity.flatten(config).items():
        leaf = key.rsplit(".", 1)[-1].lower()
        text = _text(value)
        if _says_moe(key.lower(), leaf, text):
            found.setdefault(leaf, f"{leaf}={text}")
        replay = replay or _says_replay(key.lower(), leaf, text)
    if not found:
        return []
    return [*found.values(), *(["routing_replay=on"] if replay else [])]


def derived_labels(config: Mapping[str, Any]) -> dict[str, str]:
    """`MOE_LABEL` when the config records an MoE model, else nothing."""
    settings = moe(config)
    return {MOE_LABEL: ", ".join(settings)[:200]} if settings else {}
