"""Which failure mode most likely explains a run's mismatch, from the metrics' own fingerprints.

`attribute(trace)` runs the named checks of `server.analysis.attribution_checks` and
`server.analysis.attribution_updates` on a run's per-step series and bucket sums, then scores
each hypothesis from the checks that bear on it:

- `sampler_offset` (raw instead of processed logprobs, temperature ≠ 1, top-p/top-k, a
  penalty): `mean_offset`; supported by clip/IS-mask rates above `CLIP_HIGH` and by an offset
  there from the first steps. Without an offset, `token_concentration` above the healthy level:
  a penalty leaves no offset (both sides stay normalised) but moves only the tokens it
  penalises; at a healthy level a policy sure of most tokens concentrates its noise as much.
- `stale_state` (a prefix cache or KV state outliving a weight update): `update_jump` or
  `update_onset`; supported by a prefix cache hit rate above 0.
- `head_precision` (a bf16 or lower lm_head on one side): `bucket_slope` with no offset and a
  level above healthy, or `precision_size` — a bf16-sized mismatch, steady over steps, above
  the healthy level with no fingerprint of anything else (rounding spreads its gap over the
  tokens, it does not concentrate it); supported by the steady level. Within the healthy
  level a bf16 size only supports it: an engine run wholly in bf16 rounds as much.
  On the real vLLM engine a bf16 head leaves per-token k3 flat below p ≈ 0.5 (a slope of −0.2 …
  0.3, not steep), so there its size against the project's fp32 reference run is what shows.
- `gpu_kernels` (the GPU type or its kernels): `gpu_contrast`.
- `off_policy_lag` (asynchronous rollouts lagging the trainer): `lag_tracking`; supported by a
  growing lag.
- `sampler_offset` also from the kept mass (`attribution_signatures.kept_mass`): a token-mean
  ratio at the top-p the config records, or below 1 beside a top-k.
- `quantized_rollout`: a level above healthy that holds steady, on a run whose config names a
  quantized engine (`attribution_signatures.quantized`); the setting alone only supports it.
- `routing_replay`: routing replay's active or valid share below 0.9, or its fallback above 5%.
- `growing_gap`: the signal's rank correlation with the step above 0.8, its last third ten
  times its first, with no fingerprint of another mode.
- `normal_noise`: `level` within the healthy bound (an MoE run's own, a hundred times higher,
  where its config records an MoE model), or near the project's reference run, and no
  fingerprint.
- `unknown`: a level above healthy and no fingerprint.

A run that logs no mismatch signal, or none over the steps asked for, gets no finding at all:
every hypothesis scores 0 and `missing` says what is absent and how to log it (the settings
alone never make a cause, and a level that was never read is neither healthy nor above).

Scores are in [0, 1]: `PRIMARY` for the fingerprint, `SUPPORT` for each corroboration. The run's
recorded config raises or lowers a hypothesis by `CONFIG_WEIGHT` (`attribution_config`) and is
shown beside it; it is never required, since a config can be missing or wrong, and the metrics
are what the engine actually did. The thresholds were set on the real vLLM engine's runs of
each failure mode (`benchmarks/attribution_engine.py`, tuning seeds) and are scored there on
other seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from server.analysis import attribution_checks as checks
from server.analysis import attribution_signatures as signatures
from server.analysis import attribution_updates as updates
from server.analysis.attribution_checks import Bucket, Check, GpuContrast, Reference, Series
from server.analysis.attribution_config import (
    CONFIG_RULES,
    CONFIG_WEIGHT,
    TITLES,
    ConfigNote,
    Mode,
    config_notes,
    config_weight,
)
from server.domain import signal_views, signals
from server.domain.moe import moe

__all__ = ["Attribution", "Bucket", "Check", "ConfigNote", "GpuContrast", "Hypothesis"]
__all__ += ["CONFIG_RULES", "CONFIG_WEIGHT", "TITLES", "Mode", "Reference", "Trace"]
__all__ += ["attribute", "config_notes", "config_weight"]

PRIMARY = 0.6
SUPPORT = 0.15
CLIP_HIGH = 0.01
"""A rollout clip or IS-mask rate above 1% of tokens: a healthy bf16 run masks far fewer."""
STEADY = 3.0
"""A level is steady when the last third's median is within ×3 of the first third's (k3 wanders
by ×2–5 step to step, `server.alarms.configuring.defaults.SPIKE_WHY`)."""
CLIP_METRICS = ("rollout_clip_rate", "mis_token_rate", "tis_token_rate")

_Add = Callable[[Mode, float, str], None]


@dataclass(frozen=True)
class Trace:
    """What attribution reads of one run: `signal` names its headline metric (None when it logs
    none); `series` maps metric names to {step: value}; `config` holds the run's config
    flattened to dotted keys (`server.domain.parity.flatten`); `reference` the project's
    reference run's median of the same signal, when the project has one."""

    signal: str | None
    series: Mapping[str, Series]
    buckets: Sequence[Bucket] = ()
    config: Mapping[str, str] = field(default_factory=dict)
    gpu: GpuContrast | None = None
    reference: Reference | None = None

    def get(self, metric: str) -> Series:
        return self.series.get(metric, {})


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
    missing: str | None = None
    """Why there is no finding (no signal logged, or no value of it read), and how to get one."""

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
    head = signals.BY_METRIC.get(trace.signal or "")
    raw = list(checks.finite(trace.get(trace.signal or "")).values())
    mixture = not ratio_family and bool(moe(trace.config))
    healthy_k3 = checks.HEALTHY_K3_MOE if mixture else checks.HEALTHY_K3
    return (
        checks.mean_offset(
            trace.get("k3_kl"),
            trace.get("k1_kl"),
            _ratio_series(trace),
            signals.strongest(signals.RATIO, trace.series),
        ),
        updates.update_jump(signal, trace.get("weight_version")),
        updates.update_onset(signal, trace.get("weight_version"), trace.get("lag")),
        checks.bucket_slope(trace.buckets),
        checks.precision_size(trace.get("k3_kl")),
        checks.token_concentration(trace.get("k3_kl"), trace.get("k3_kl_p99")),
        checks.lag_tracking(signal, trace.get("lag")),
        checks.gpu_contrast(trace.gpu),
        checks.level(
            signal,
            healthy=checks.HEALTHY_RATIO if ratio_family else healthy_k3,
            unit="ratio drift ×1e4" if ratio_family else "k3",
            reference=trace.reference,
            own=head,
            near=float(np.median(raw)) if raw else math.nan,
            bound_name="the healthy bound of MoE runs" if mixture else "the healthy bound",
        ),
    )


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


def _steady(trace: Trace) -> str | None:
    """ "steady over steps (first third → last third)" when the signal is, else None."""
    signal = [v for _, v in sorted(checks.finite(_scaled(trace)).items())]
    if not signal:
        return None
    first, last = checks.thirds(signal)
    if first > 0 and 1 / STEADY <= last / first <= STEADY:
        return f"steady over steps ({first:.3g} → {last:.3g})"
    return None


def _evidence(trace: Trace, found: Mapping[str, Check]) -> dict[Mode, tuple[float, list[str]]]:
    """Each mode's score from the checks alone, with the sentences behind it."""
    clip = [
        float(np.median(list(checks.finite(trace.get(m)).values())))
        for m in CLIP_METRICS
        if checks.finite(trace.get(m))
    ]
    cache = list(checks.finite(trace.get("prefix_cache_hit_rate")).values())
    lags = [v for _, v in sorted(checks.finite(trace.get("lag")).items())]
    out: dict[Mode, tuple[float, list[str]]] = {}

    def add(mode: Mode, score: float, sentence: str) -> None:
        old, said = out.get(mode, (0.0, []))
        out[mode] = (old + score, [*said, sentence])

    above = found["level"].passed is False
    offset, jump = _passed(found, "mean_offset"), _passed(found, "update_jump")
    onset, lagging = _passed(found, "update_onset"), _passed(found, "lag_tracking")
    concentrated = _passed(found, "token_concentration")
    if offset:
        add("sampler_offset", PRIMARY, found["mean_offset"].sentence)
        if clip and max(clip) > CLIP_HIGH:
            add("sampler_offset", SUPPORT, f"clip/IS-mask rate {max(clip):.1%} of tokens")
        if _from_start(trace):
            add("sampler_offset", SUPPORT, "already there in the first steps: a setting")
    elif concentrated and above:  # at a healthy level a near-sure policy concentrates too
        add("sampler_offset", PRIMARY, found["token_concentration"].sentence)
    if jump:
        add("stale_state", PRIMARY, found["update_jump"].sentence)
    if onset:
        add("stale_state", SUPPORT if jump else PRIMARY, found["update_onset"].sentence)
    if cache and max(cache) > 0 and (jump or onset or (lags and max(lags) > 0)):
        add(
            "stale_state",
            SUPPORT,
            f"prefix cache hit rate up to {max(cache):.0%}"
            + ("" if jump or onset else " while rollouts lag the trainer"),
        )
    other = offset or concentrated or jump or onset or lagging
    _head_evidence(trace, found, add, above=above, other=other)
    if _passed(found, "gpu_contrast"):
        add("gpu_kernels", PRIMARY, found["gpu_contrast"].sentence)
    if lagging:
        add("off_policy_lag", PRIMARY, found["lag_tracking"].sentence)
        first, last = checks.thirds(lags)
        if last > first:
            add("off_policy_lag", SUPPORT, f"lag grows over the run ({first:.3g} → {last:.3g})")
    _signature_evidence(trace, add, above=above, other=other)
    return out


def _signature_evidence(trace: Trace, add: _Add, *, above: bool, other: bool) -> None:
    """The fingerprints of `attribution_signatures`: kept mass, quantization, routing replay
    and a steadily growing gap."""
    kept = signatures.kept_mass(trace.series, trace.config)
    if kept is not None:
        add("sampler_offset", PRIMARY, kept)
    quantized = signatures.quantized(trace.config)
    steady = _steady(trace)
    if quantized is not None and above and steady is not None:
        add("quantized_rollout", PRIMARY, f"a steady level above healthy with {quantized}")
        add("quantized_rollout", SUPPORT, steady)
    elif quantized is not None:
        add("quantized_rollout", SUPPORT, f"the config names a quantized engine ({quantized})")
    replay = signatures.routing_replay(trace.series)
    if replay is not None:
        add("routing_replay", PRIMARY, replay)
    growth = signatures.growing(_scaled(trace))
    if growth is not None and not (other or kept or replay):
        add("growing_gap", PRIMARY, growth)


def _head_evidence(
    trace: Trace,
    found: Mapping[str, Check],
    add: _Add,
    *,
    above: bool,
    other: bool,
) -> None:
    """A low-precision head: a steep bucket slope above the healthy level with no offset, or a
    bf16-sized level, steady over steps, above it with no fingerprint of any other mode (a
    rounding difference leaves no offset, no update or lag link, and does not grow: a run that
    has begun to collapse is something else). Within the healthy level a bf16 size is only a
    hint: an engine run wholly in bf16 rounds as much."""
    offset = _passed(found, "mean_offset")
    steady = _steady(trace)
    primary = False
    if _passed(found, "bucket_slope") and not offset and above:
        add("head_precision", PRIMARY, found["bucket_slope"].sentence)
        primary = True
    rounding = _passed(found, "precision_size") and steady is not None
    if rounding and not other and not _passed(found, "gpu_contrast"):
        if above and not primary:
            add("head_precision", PRIMARY, found["precision_size"].sentence)
            add("head_precision", 0.0, found["level"].sentence)
            primary = True
        elif not above:
            add(
                "head_precision",
                SUPPORT,
                found["precision_size"].sentence + ", though within the healthy level: "
                "a bf16 engine rounds as much; above an fp32 reference it would point here",
            )
    if primary and steady:
        add("head_precision", SUPPORT, steady)


def missing(trace: Trace) -> str | None:
    """What the attribution lacks to say anything: no mismatch signal logged, or no finite
    value of it read; None when it has a signal to read."""
    if trace.signal is None:
        return signal_views.no_signal()
    if not checks.finite(_scaled(trace)):
        return (
            f"This run logs {trace.signal} but no finite value of it over these steps, so there "
            "is nothing to read: widen the step range, or check that the trainer sends it."
        )
    return None


def _nothing(trace: Trace, ran: tuple[Check, ...], why: str) -> Attribution:
    """Every hypothesis at 0 with no evidence, in table order: no data, no finding."""
    hypotheses = tuple(Hypothesis(mode, TITLES[mode], 0.0, (), ()) for mode in TITLES)
    return Attribution(trace.signal, 0, ran, hypotheses, why)


def attribute(trace: Trace) -> Attribution:
    """The checks and the hypotheses of one run, the likeliest first (ties in table order);
    without a signal to read, no finding (`missing`)."""
    ran = run_checks(trace)
    why = missing(trace)
    if why is not None:
        return _nothing(trace, ran, why)
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
