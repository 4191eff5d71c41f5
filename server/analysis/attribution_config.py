"""The recorded settings as attribution's evidence: which failure modes there are, and which
settings of a run's config raise or lower each (`server.analysis.attribution` adds them to the
metrics' scores). A config can be missing or wrong, and the metrics are what the engine did, so
a setting moves a score by less than a fingerprint and is always shown beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from server.domain import parity, sampler

__all__ = ["CONFIG_RULES", "CONFIG_WEIGHT", "TITLES", "ConfigNote", "Mode"]
__all__ += ["config_notes", "config_weight"]

CONFIG_WEIGHT = 0.15
"""A config setting moves a score by less than a fingerprint: it says what was asked of the
engine, the metrics what it did."""

Mode = Literal[
    "sampler_offset",
    "stale_state",
    "head_precision",
    "gpu_kernels",
    "off_policy_lag",
    "quantized_rollout",
    "routing_replay",
    "growing_gap",
    "normal_noise",
    "unknown",
]
TITLES: dict[Mode, str] = {
    "sampler_offset": "raw instead of processed logprobs, or a sampler-only setting "
    "(temperature, top-p/top-k, penalty)",
    "stale_state": "a prefix cache or KV state outliving a weight update",
    "head_precision": "a bf16 (or lower precision) lm_head on one side",
    "gpu_kernels": "the GPU type or its kernels",
    "off_policy_lag": "asynchronous, off-policy lag",
    "quantized_rollout": "a quantized rollout engine (int8, fp8, w8a8 …) beside a bf16 trainer",
    "routing_replay": "MoE routing replay switched off or degraded",
    "growing_gap": "a gap growing steadily with training (weights or caches drifting apart)",
    "normal_noise": "within normal noise",
    "unknown": "unknown: above the healthy level with no known fingerprint",
}


@dataclass(frozen=True, slots=True)
class ConfigNote:
    """A recorded setting that moved a hypothesis: `effect` is "raises" or "lowers"."""

    key: str
    value: str
    effect: Literal["raises", "lowers"]
    why: str


_Rule = tuple[str, Mode, Callable[[str], Literal["raises", "lowers"] | None]]


def _lowered(
    words: tuple[str, ...], lowering: tuple[str, ...]
) -> Callable[[str], Literal["raises", "lowers"] | None]:
    def judge(value: str) -> Literal["raises", "lowers"] | None:
        text = value.lower()
        if any(w in text for w in words):
            return "raises"
        return "lowers" if any(w in text for w in lowering) else None

    return judge


CONFIG_RULES: tuple[_Rule, ...] = (
    ("logprobs_mode", "sampler_offset", _lowered(("raw",), ("processed",))),
    ("enable_prefix_caching", "stale_state", _lowered(("true", "1"), ("false", "0"))),
    ("clear_cache", "stale_state", _lowered(("false",), ("true",))),
    (
        "head_dtype",
        "head_precision",
        _lowered(("bf16", "bfloat16", "fp16", "half", "fp8"), ("fp32", "float32")),
    ),
    (
        "lm_head_dtype",
        "head_precision",
        _lowered(("bf16", "bfloat16", "fp16", "half", "fp8"), ("fp32", "float32")),
    ),
    ("async_scheduling", "off_policy_lag", _lowered(("true",), ("false",))),
)
"""Settings read as evidence, by the last component of their dotted key, besides the sampler-only
ones (`sampler.SETTINGS`, judged by `sampler.active`, all evidence of "sampler_offset"). A
setting the engine ignores still reads here: it is a hint, shown."""


def _effect(active: bool | None) -> Literal["raises", "lowers"] | None:
    return None if active is None else "raises" if active else "lowers"


def config_notes(config: Mapping[str, str]) -> dict[Mode, list[ConfigNote]]:
    """The recorded settings that bear on each mode (a temperature only beside raw logprobs:
    with processed logprobs the trainer applies the same temperature, and it explains
    nothing)."""
    notes: dict[Mode, list[ConfigNote]] = {}
    raw = sampler.raw_logprobs(config)
    for key, value in sorted(config.items()):
        leaf = key.rsplit(".", 1)[-1]
        found: list[tuple[Mode, Literal["raises", "lowers"] | None]] = [
            (mode, judge(value)) for name, mode, judge in CONFIG_RULES if name == leaf
        ]
        if leaf in sampler.SETTINGS:
            found.append(("sampler_offset", _effect(sampler.active(leaf, value, raw=raw))))
        for mode, effect in found:
            if effect is not None:
                notes.setdefault(mode, []).append(ConfigNote(key, value, effect, parity.why(key)))
    return notes


def config_weight(notes: Sequence[ConfigNote]) -> float:
    """What recorded settings add to a hypothesis: `CONFIG_WEIGHT` per setting that raises it
    (two at most); settings that lower it count only when none raises it, since a neutral
    setting beside the one that explains the mode argues nothing (top_p = 1 beside raw
    logprobs), and an fp32 head on the other side is what "one side" means."""
    raises = sum(n.effect == "raises" for n in notes)
    if raises:
        return CONFIG_WEIGHT * min(raises, 2)
    return -CONFIG_WEIGHT if notes else 0.0
