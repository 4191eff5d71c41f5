"""Read-models of the hardware post-mortem: per-GPU distributions, the like-for-like group, the
ratios between GPU types with their intervals, and the runs left out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareRow:
    """Distribution of one metric over the steps of one GPU type (box-plot quantiles)."""

    gpu: str
    metric: str
    runs: int
    actors: int
    steps: int
    nonfinite: int
    min: float | None
    p05: float | None
    q1: float | None
    median: float | None
    q3: float | None
    p95: float | None
    max: float | None
    mean: float | None
    quantiles_from: int = 0  # finite values the quantiles were computed from (≤ steps)


@dataclass(frozen=True)
class Setting:
    key: str
    value: str | None  # None: the runs of the group do not set it


@dataclass(frozen=True)
class GpuFigures:
    gpu: str
    runs: int
    segments: int
    steps: int
    nonfinite: int
    median: float | None
    p95: float | None


@dataclass(frozen=True)
class Pair:
    """`a`'s median over `b`'s; `ratio` None when it is undefined (`sentence` says why)."""

    a: str
    b: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    level: float
    runs_a: int
    runs_b: int
    steps_a: int
    steps_b: int
    sentence: str


@dataclass(frozen=True)
class Group:
    """Runs that share every compared setting: only the GPU differs among them."""

    settings: tuple[Setting, ...]
    run_ids: tuple[str, ...]
    gpus: tuple[GpuFigures, ...]
    pairs: tuple[Pair, ...]
    distribution: tuple[HardwareRow, ...]


@dataclass(frozen=True)
class Excluded:
    """A run left out of the group, once per setting that keeps it out."""

    run_id: str
    name: str
    gpu: str
    setting: str
    value: str | None
    group_value: str | None


@dataclass(frozen=True)
class HardwareComparison:
    """The pooled per-GPU rows of every selected run, and the like-for-like group (none when no
    group spans two GPU types) with the runs left out of it."""

    pooled: tuple[HardwareRow, ...]
    metric: str
    group_by: str
    groups: tuple[Group, ...]
    excluded: tuple[Excluded, ...]
    note: str

    @property
    def group(self) -> Group | None:
        """The group compared (one at most)."""
        return self.groups[0] if self.groups else None
