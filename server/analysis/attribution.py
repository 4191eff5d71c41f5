"""Which failure mode most likely explains a run's mismatch, from the metrics' own fingerprints.

`attribute(trace)` runs the named checks of `server.analysis.attribution_checks` on a run's
per-step series and bucket sums, then scores each hypothesis from the checks that bear on it:

- `sampler_offset` (raw instead of processed logprobs, temperature ≠ 1, top-p/top-k, a
  penalty): `mean_offset`; supported by clip/IS-mask rates above `CLIP_HIGH`.
- `stale_state` (a prefix cache or KV state outliving a weight update): `update_jump`; supported
  by a prefix cache hit rate above 0.
- `head_precision` (a bf16 or lower lm_head on one side): `bucket_slope` with no offset and a
  level above healthy; supported by a level steady over steps.
- `gpu_kernels` (the GPU type or its kernels): `gpu_contrast`.
- `off_policy_lag` (asynchronous rollouts lagging the trainer): `lag_tracking`.
- `normal_noise`: `level` within the healthy bound and no fingerprint.
- `unknown`: a level above healthy (or no signal) and no fingerprint.

Scores are in [0, 1]: `PRIMARY` for the fingerprint, `SUPPORT` for each corroboration. The run's
recorded config (the parity keys of `server.domain.parity`) raises or lowers a hypothesis by
`CONFIG_WEIGHT` and is shown beside it; it is never required, since a config can be missing or
wrong, and the metrics are what the engine actually did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from server.analysis import attribution_checks as checks
from server.analysis.attribution_checks import Bucket, Check, GpuContrast, Series
from server.domain import parity, signals

__all__ = ["Attribution", "Bucket", "Check", "ConfigNote", "GpuContrast", "Hypothesis"]
__all__ += ["Trace", "attribute"]

PRIMARY = 0.6
SUPPORT = 0.15
CONFIG_WEIGHT = 0.15
"""A config setting moves a score by less than a fingerprint: it says what was asked of the
engine, the metrics what it did."""
CLIP_HIGH = 0.01
"""A rollout clip or IS-mask rate above 1% of tokens: a healthy bf16 run masks far fewer."""
STEADY = 3.0
"""A level is steady when the last third's median is within ×3 of the first third's (k3 wanders
by ×2–5 step to step, `server.alarms.defaults.SPIKE_WHY`)."""

Mode = Literal[
    "sampler_offset",
    "stale_state",
    "head_precision",
    "gpu_kernels",
    "off_policy_lag",
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
    "normal_noise": "within normal noise",
    "unknown": "unknown: above the healthy level with no known fingerprint",
}
CLIP_METRICS = ("rollout_clip_rate", "mis_token_rate", "tis_token_rate")


@dataclass(frozen=True)
class Trace:
    """What attribution reads of one run: `signal` names its headline metric (None when it logs
    none); `series` maps metric names to {step: value}; `config` holds the run's config
    flattened to dotted keys (`server.domain.parity.flatten`)."""

    signal: str | None
    series: Mapping[str, Series]
    buckets: Sequence[Bucket] = ()
    config: Mapping[str, str] = field(default_factory=dict)
    gpu: GpuContrast | None = None

    def get(self, metric: str) -> Series:
        return self.series.get(metric, {})


@dataclass(frozen=True, slots=True)
class ConfigNote:
    """A recorded setting that moved a hypothesis: `effect` is "raises" or "lowers"."""

    key: str
    value: str
    effect: Literal["raises", "lowers"]
    why: str


@dataclass(frozen=True, slots=True)
class Hypothesis:
    mode: Mode
    title: str
    score: float
    evidence: tuple[str, ...]
    config: tuple[ConfigNote, ...]


@dataclass(frozen=True, slots=True)
class Attribution:
    signal: str | None
    steps: int
    checks: tuple[Check, ...]
    hypotheses: tuple[Hypothesis, ...]  # best first

    @property
    def top(self) -> Hypothesis:
        return self.hypotheses[0]


def _scaled(trace: Trace) -> Series:
    """The headline signal on its family's scale (k3 for vllm-kl, ×1e4 for ratio drift)."""
    if trace.signal is None:
        return {}
    signal = signals.BY_METRIC.get(trace.signal)
    raw = trace.get(trace.signal)
    return raw if signal is None else {s: signal.to_scale(v) for s, v in raw.items()}


def _ratio_series(trace: Trace) -> Series:
    found = signals.strongest(signals.RATIO, trace.series)
    return (
        {} if found is None else {s: found.to_scale(v) for s, v in trace.get(found.metric).items()}
    )


def run_checks(trace: Trace) -> tuple[Check, ...]:
    signal = _scaled(trace)
    family = signals.BY_METRIC[trace.signal].family if trace.signal in signals.BY_METRIC else None
    ratio_family = family == signals.RATIO
    return (
        checks.mean_offset(trace.get("k3_kl"), trace.get("k1_kl"), _ratio_series(trace)),
        checks.update_jump(signal, trace.get("weight_version")),
        checks.bucket_slope(trace.buckets),
        checks.lag_tracking(signal, trace.get("lag")),
        checks.gpu_contrast(trace.gpu),
        checks.level(
            signal,
            healthy=checks.HEALTHY_RATIO if ratio_family else checks.HEALTHY_K3,
            unit="ratio drift ×1e4" if ratio_family else "k3",
        ),
    )


def _number(text: str) -> float | None:
    try:
        return float(text.strip('"'))
    except ValueError:
        return None


_Rule = tuple[str, Mode, Callable[[str], Literal["raises", "lowers"] | None]]


def _neutral_unless(neutral: float) -> Callable[[str], Literal["raises", "lowers"] | None]:
    def judge(value: str) -> Literal["raises", "lowers"] | None:
        number = _number(value)
        if number is None:
            return None
        return "lowers" if number == neutral or number < 0 else "raises"

    return judge


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
    ("temperature", "sampler_offset", _neutral_unless(1.0)),
    ("top_p", "sampler_offset", _neutral_unless(1.0)),
    ("top_k", "sampler_offset", _neutral_unless(0.0)),
    ("repetition_penalty", "sampler_offset", _neutral_unless(1.0)),
    ("presence_penalty", "sampler_offset", _neutral_unless(0.0)),
    ("frequency_penalty", "sampler_offset", _neutral_unless(0.0)),
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
"""Settings read as evidence, by the last component of their dotted key (`top_k` ≤ 0 and
`top_p` = 1 mean off). A setting the engine ignores still reads here: it is a hint, shown."""


def config_notes(config: Mapping[str, str]) -> dict[Mode, list[ConfigNote]]:
    """The recorded settings that bear on each mode. A temperature other than 1 counts only
    beside raw logprobs: with processed logprobs the trainer applies the same temperature (a
    trainer's own `temperature` key says so), and it explains nothing."""
    notes: dict[Mode, list[ConfigNote]] = {}
    raw = any(
        k.rsplit(".", 1)[-1] == "logprobs_mode" and "raw" in v.lower() for k, v in config.items()
    )
    for key, value in sorted(config.items()):
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "temperature" and not raw:
            continue
        for name, mode, judge in CONFIG_RULES:
            effect = judge(value) if name == leaf else None
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


def _passed(found: Mapping[str, Check], name: str) -> bool:
    return found[name].passed is True


def _from_start(trace: Trace) -> bool:
    """Does the offset hold over the first third of the steps alone (a setting is there from
    step one; a drift that grows into an offset is something else)?"""
    steps = sorted(checks.finite(trace.get("k3_kl")) or checks.finite(_ratio_series(trace)))
    early = set(steps[: max(len(steps) // 3, checks.MIN_STEPS)])

    def head(series: Series) -> Series:
        return {s: v for s, v in series.items() if s in early}

    found = checks.mean_offset(
        head(trace.get("k3_kl")), head(trace.get("k1_kl")), head(_ratio_series(trace))
    )
    return found.passed is True


def _evidence(trace: Trace, found: Mapping[str, Check]) -> dict[Mode, tuple[float, list[str]]]:
    """Each mode's score from the checks alone, with the sentences behind it."""
    signal = [v for _, v in sorted(checks.finite(_scaled(trace)).items())]
    first, last = checks.thirds(signal) if signal else (math.nan, math.nan)
    steady = bool(signal) and first > 0 and 1 / STEADY <= last / first <= STEADY
    clip = [
        float(np.median(list(checks.finite(trace.get(m)).values())))
        for m in CLIP_METRICS
        if checks.finite(trace.get(m))
    ]
    cache = list(checks.finite(trace.get("prefix_cache_hit_rate")).values())
    out: dict[Mode, tuple[float, list[str]]] = {}

    def add(mode: Mode, score: float, sentence: str) -> None:
        old, said = out.get(mode, (0.0, []))
        out[mode] = (old + score, [*said, sentence])

    above = found["level"].passed is False
    if _passed(found, "mean_offset"):
        add("sampler_offset", PRIMARY, found["mean_offset"].sentence)
        if clip and max(clip) > CLIP_HIGH:
            add("sampler_offset", SUPPORT, f"clip/IS-mask rate {max(clip):.1%} of tokens")
        if _from_start(trace):
            add("sampler_offset", SUPPORT, "already there in the first steps: a setting")
    lags = list(checks.finite(trace.get("lag")).values())
    if _passed(found, "update_jump"):
        add("stale_state", PRIMARY, found["update_jump"].sentence)
    if cache and max(cache) > 0 and (_passed(found, "update_jump") or (lags and max(lags) > 0)):
        add(
            "stale_state",
            SUPPORT,
            f"prefix cache hit rate up to {max(cache):.0%}"
            + ("" if _passed(found, "update_jump") else " while rollouts lag the trainer"),
        )
    if _passed(found, "bucket_slope") and not _passed(found, "mean_offset") and above:
        add("head_precision", PRIMARY, found["bucket_slope"].sentence)
        if steady:
            add("head_precision", SUPPORT, f"steady over steps ({first:.3g} → {last:.3g})")
    if _passed(found, "gpu_contrast"):
        add("gpu_kernels", PRIMARY, found["gpu_contrast"].sentence)
    if _passed(found, "lag_tracking"):
        add("off_policy_lag", PRIMARY, found["lag_tracking"].sentence)
    return out


def attribute(trace: Trace) -> Attribution:
    """The checks and the hypotheses of one run, the likeliest first (ties in table order)."""
    ran = run_checks(trace)
    found = {c.name: c for c in ran}
    scores = _evidence(trace, found)
    notes = config_notes(trace.config)
    hypotheses: list[Hypothesis] = []
    for mode in TITLES:
        score, evidence = scores.get(mode, (0.0, []))
        mine = notes.get(mode, [])
        score += config_weight(mine)
        hypotheses.append(Hypothesis(mode, TITLES[mode], score, tuple(evidence), tuple(mine)))
    best = max((h.score for h in hypotheses), default=0.0)
    level = found["level"]
    fallback: Mode = "normal_noise" if level.passed else "unknown"
    for i, h in enumerate(hypotheses):
        if h.mode == fallback:
            lift = max(0.0, 0.8 - best) if best < PRIMARY else 0.1
            hypotheses[i] = Hypothesis(h.mode, h.title, lift, (level.sentence,), h.config)
    clipped = [
        Hypothesis(h.mode, h.title, round(min(max(h.score, 0.0), 1.0), 3), h.evidence, h.config)
        for h in hypotheses
    ]
    order = {mode: i for i, mode in enumerate(TITLES)}
    clipped.sort(key=lambda h: (-h.score, order[h.mode]))
    steps = len(checks.finite(_scaled(trace)))
    return Attribution(trace.signal, steps, ran, tuple(clipped))
