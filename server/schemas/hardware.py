"""What the hardware post-mortem returns: per-GPU figures of a like-for-like group, the ratios
between GPU types with their intervals, and the runs left out with the setting that keeps them
out. `data` and `count` keep the pooled per-GPU rows the endpoint always returned."""

from __future__ import annotations

from pydantic import Field

from server.domain.reads.hardware import Excluded, GpuFigures, Group, Pair, Setting
from server.schemas.derive import derived_from
from server.schemas.reads import HardwareOut, Out


@derived_from(Setting, value=Field(description="None: the runs of the group do not set it"))
class SettingOut(Out):
    pass


@derived_from(
    GpuFigures,
    runs=Field(description="Runs with values on this GPU type (a resumed run counts under each)"),
    segments=Field(description="(run, GPU) pieces: a run resumed on other hardware is two"),
    steps=Field(description="Finite values behind the median"),
)
class GpuFiguresOut(Out):
    pass


@derived_from(Pair, level=Field(description="Coverage the interval aims at"))
class PairOut(Out):
    """`a`'s median over `b`'s; `ratio` None when it is undefined (`sentence` says why)."""


@derived_from(Group, distribution=Field(description="The group's per-GPU quantiles (box plot)"))
class GroupOut(Out):
    """Runs that share every compared setting: only the GPU differs among them."""


@derived_from(Excluded)
class ExcludedOut(Out):
    """A run left out of the group, once per setting that keeps it out."""


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
