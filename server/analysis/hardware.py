"""Like-for-like hardware comparison: GPU segments, parity groups, median ratios with intervals.

The GPU type can move k3 ("vllm-kl") by orders of magnitude (A100 at 1e-2…1 where H20 sits near
1e-3, and a failed L20 run resumed on H20 recovered), so teams compare runs across GPU types. A
fair comparison needs three things, each a pure function here:

1. `gpu_segments` — where a run changed hardware (a resumed run is two comparable pieces);
2. `like_for_like` / `like_for_like_by_label` — which runs share every parity-relevant setting,
   so the GPU is the only thing that differs, and why each other run was left out;
3. `median_ratio` / `all_pairs` / `describe` — how many times larger one GPU type's median is
   than another's, with a bootstrap interval that respects run-to-run spread and the
   autocorrelation of steps (defined in `server.analysis.ratios`, exported from here so callers
   import one module).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from server.analysis.block_bootstrap import FloatArray
from server.analysis.ratios import (
    MAX_STEPS_PER_RUN,
    RatioEstimate,
    all_pairs,
    describe,
    format_ratio,
    median_ratio,
)
from server.errors import Rejected

__all__ = [
    "GPU_KEYS",
    "MAX_STEPS_PER_RUN",
    "UNKNOWN_GPU",
    "CandidateRun",
    "Exclusion",
    "GpuSegment",
    "ParityGroup",
    "ParityPlan",
    "RatioEstimate",
    "Setting",
    "SettingMismatch",
    "all_pairs",
    "describe",
    "format_ratio",
    "gpu_segments",
    "like_for_like",
    "like_for_like_by_label",
    "median_ratio",
    "segment_values",
]

UNKNOWN_GPU = "unknown"
"""What storage reports for a step whose GPU was not recorded."""

GPU_KEYS = frozenset({"gpu", "gpu_name", "gpu_type", "device_name"})
"""Config keys (last dotted component) that name the GPU: never parity keys, since the GPU is
what is compared."""


# --- 1. GPU segments inside a run -------------------------------------------------------------


@dataclass(frozen=True)
class GpuSegment:
    """A stretch of one run on one GPU type, steps `first_step`..`last_step` inclusive."""

    gpu: str
    first_step: int
    last_step: int

    def contains(self, step: int) -> bool:
        return self.first_step <= step <= self.last_step


def _known_gpu(gpu: str | None) -> str | None:
    name = (gpu or "").strip()
    return None if not name or name.lower() == UNKNOWN_GPU else name


def gpu_segments(records: Iterable[tuple[int, str | None]]) -> list[GpuSegment]:
    """Split one run into contiguous segments by GPU type, in step order.

    `records` are `(step, gpu)` pairs in any order; pass one source's records (the rollout
    engine's or the trainer's). A step whose records name several GPUs is labelled with the
    names joined by "+": a mixed fleet is its own hardware. The same GPU appearing again after
    another is a new segment.

    Steps with no known GPU (None, "", "unknown") never start or end a segment: between two
    steps of the same GPU they are absorbed into its segment (a collector that missed the device
    name for a while did not move the run); between different GPUs, or before the first or
    after the last known step, they belong to no segment, since which hardware ran them cannot
    be told. A run with no known GPU has no segments.
    """
    by_step: dict[int, set[str]] = {}
    for step, gpu in records:
        names = by_step.setdefault(int(step), set())
        name = _known_gpu(gpu)
        if name is not None:
            names.add(name)
    segments: list[GpuSegment] = []
    for step in sorted(by_step):
        if not by_step[step]:
            continue
        gpu = "+".join(sorted(by_step[step]))
        if segments and segments[-1].gpu == gpu:
            segments[-1] = replace(segments[-1], last_step=step)
        else:
            segments.append(GpuSegment(gpu, step, step))
    return segments


def segment_values(steps: ArrayLike, values: ArrayLike, segment: GpuSegment) -> FloatArray:
    """The finite values of one run that fall in `segment`, in step order."""
    step_array = np.asarray(steps)
    value_array = np.asarray(values, dtype=np.float64)
    order = np.argsort(step_array, kind="stable")
    step_array, value_array = step_array[order], value_array[order]
    inside = (step_array >= segment.first_step) & (step_array <= segment.last_step)
    return np.asarray(value_array[inside & np.isfinite(value_array)], dtype=np.float64)


# --- 2. Like-for-like groups --------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateRun:
    """A run, or one GPU segment of a resumed run, offered for comparison.

    `config` is flattened (dotted key → string value); `labels` are the run's user labels.
    """

    run_id: str
    gpu: str
    config: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    """One parity setting; `value` None means the run does not set it."""

    key: str
    value: str | None


@dataclass(frozen=True)
class SettingMismatch:
    """A setting on which a run differs from the compared group."""

    key: str
    value: str | None
    group_value: str | None


@dataclass(frozen=True)
class Exclusion:
    """A run left out of the comparison, with every setting that keeps it out."""

    run_id: str
    gpu: str
    mismatches: tuple[SettingMismatch, ...]


@dataclass(frozen=True)
class ParityGroup:
    """Runs that share every parity setting; only the GPU may differ among them."""

    settings: tuple[Setting, ...]
    runs: tuple[CandidateRun, ...]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(sorted({run.gpu for run in self.runs}))

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(run.run_id for run in self.runs))


@dataclass(frozen=True)
class ParityPlan:
    """The groups found (largest first), the one to compare, and the runs left out of it.

    `chosen` is None when no group spans two GPU types (and no reference run was given); then
    nothing is excluded, because there is nothing to compare against.
    """

    basis: Literal["config", "label"]
    keys: tuple[str, ...]
    groups: tuple[ParityGroup, ...]
    chosen: ParityGroup | None
    excluded: tuple[Exclusion, ...]


def _last_component(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _config_value(config: Mapping[str, str], key: str) -> str | None:
    """The run's value for a parity key, matched on the last dotted component.

    Several config keys can end in the same name (`engine.dtype`, `trainer.dtype`): one value
    when they agree, else every `full_key=value` pair, so two runs match only if all agree.
    """
    found = {full: value for full, value in config.items() if _last_component(full) == key}
    values = set(found.values())
    if not values:
        return None
    if len(values) == 1:
        return values.pop()
    return ", ".join(f"{full}={found[full]}" for full in sorted(found))


def like_for_like(
    runs: Sequence[CandidateRun],
    *,
    parity_keys: Sequence[str],
    reference_run: str | None = None,
    gpu_keys: Collection[str] = GPU_KEYS,
) -> ParityPlan:
    """Group runs by their parity-relevant config and pick the group to compare.

    Keys match on their last dotted component (`engine.logprobs_mode` matches `logprobs_mode`);
    keys naming the GPU (`gpu_keys`) are dropped. The chosen group is the one holding
    `reference_run` when given, else the largest (most runs, then most GPU types) that spans at
    least two GPU types.
    """
    keys = tuple(
        dict.fromkeys(short for short in map(_last_component, parity_keys) if short not in gpu_keys)
    )

    def values_of(run: CandidateRun) -> tuple[str | None, ...]:
        return tuple(_config_value(run.config, key) for key in keys)

    return _plan(runs, keys, values_of, "config", reference_run)


def like_for_like_by_label(
    runs: Sequence[CandidateRun], *, label: str, reference_run: str | None = None
) -> ParityPlan:
    """Group runs by the value of a user-picked label instead of their configs.

    Runs without the label are never chosen as a group of their own: they are excluded, named
    with the label's value missing.
    """

    def values_of(run: CandidateRun) -> tuple[str | None, ...]:
        return (run.labels.get(label),)

    return _plan(runs, (label,), values_of, "label", reference_run)


def _plan(
    runs: Sequence[CandidateRun],
    keys: tuple[str, ...],
    values_of: Callable[[CandidateRun], tuple[str | None, ...]],
    basis: Literal["config", "label"],
    reference_run: str | None,
) -> ParityPlan:
    """Bucket runs by their setting values, rank the buckets, choose one, explain the rest."""
    buckets: dict[tuple[str | None, ...], list[CandidateRun]] = {}
    for run in runs:
        buckets.setdefault(values_of(run), []).append(run)
    groups = sorted(
        (
            ParityGroup(tuple(Setting(k, v) for k, v in zip(keys, values, strict=True)), tuple(m))
            for values, m in buckets.items()
        ),
        key=lambda g: (
            -len(g.run_ids),
            -len(g.gpus),
            -len(g.runs),
            [(s.value is None, s.value or "") for s in g.settings],
        ),
    )
    if reference_run is not None:
        holding = [g for g in groups if reference_run in g.run_ids]
        if not holding:
            raise Rejected(f"reference run {reference_run!r} is not among the runs compared")
        chosen: ParityGroup | None = holding[0]
    else:
        chosen = next(
            (
                g
                for g in groups
                if len(g.gpus) >= 2
                and not (basis == "label" and any(s.value is None for s in g.settings))
            ),
            None,
        )
    excluded: list[Exclusion] = []
    if chosen is not None:
        wanted = tuple(s.value for s in chosen.settings)
        for run in runs:
            values = values_of(run)
            if values != wanted:
                mismatches = tuple(
                    SettingMismatch(k, v, w)
                    for k, v, w in zip(keys, values, wanted, strict=True)
                    if v != w
                )
                excluded.append(Exclusion(run.run_id, run.gpu, mismatches))
    return ParityPlan(basis, keys, tuple(groups), chosen, tuple(excluded))
