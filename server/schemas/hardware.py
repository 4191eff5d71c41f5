"""What the hardware post-mortem returns: per-GPU figures of a like-for-like group, the ratios
between GPU types with their intervals, and the runs left out with the setting that keeps them
out. `data` and `count` keep the pooled per-GPU rows the endpoint always returned."""

from __future__ import annotations

from pydantic import Field

from server.schemas.reads import HardwareOut, Out


class SettingOut(Out):
    key: str
    value: str | None = Field(description="None: the runs of the group do not set it")


class GpuFiguresOut(Out):
    gpu: str
    runs: int = Field(
        description="Runs with values on this GPU type (a resumed run counts under each)"
    )
    segments: int = Field(description="(run, GPU) pieces: a run resumed on other hardware is two")
    steps: int = Field(description="Finite values behind the median")
    nonfinite: int
    median: float | None
    p95: float | None


class PairOut(Out):
    """`a`'s median over `b`'s; `ratio` None when it is undefined (`sentence` says why)."""

    a: str
    b: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    level: float = Field(description="Coverage the interval aims at")
    runs_a: int
    runs_b: int
    steps_a: int
    steps_b: int
    sentence: str


class GroupOut(Out):
    """Runs that share every compared setting: only the GPU differs among them."""

    settings: list[SettingOut]
    run_ids: list[str]
    gpus: list[GpuFiguresOut]
    pairs: list[PairOut]
    distribution: list[HardwareOut] = Field(description="The group's per-GPU quantiles (box plot)")


class ExcludedOut(Out):
    """A run left out of the group, once per setting that keeps it out."""

    run_id: str
    name: str
    gpu: str
    setting: str
    value: str | None
    group_value: str | None


class HardwareComparisonOut(Out):
    data: list[HardwareOut] = Field(description="Per GPU type over every selected run, pooled")
    count: int
    metric: str
    group_by: str = Field(description="parity, label:KEY or config:KEY")
    groups: list[GroupOut] = Field(
        description="The like-for-like group compared (empty when no group spans two GPU types)"
    )
    excluded: list[ExcludedOut]
    note: str = Field(description="What the comparison rests on, in a sentence")
