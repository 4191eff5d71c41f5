"""Read-models of stored values: a downsampled series, token-probability bucket sums, and the
bucket × step cells of a heatmap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

BucketGroup = Literal["none", "gpu", "actor", "run"]
"""What bucket sums are summed per: nothing (one 'all' group), GPU type, actor, or run."""


class SeriesPoint(NamedTuple):
    """One step bucket of a series. With no downsampling a bucket holds one step and min = max =
    mean = last; min/max/mean are over finite values only (None where it holds none) and the
    non-finite values are counted, so a NaN or an Inf is never hidden by a bucket. A named tuple
    in storage's column order: a read returns thousands, and a tuple costs no more than the row."""

    step: int
    step_end: int
    min: float | None
    max: float | None
    mean: float | None
    last: float
    count: int  # type: ignore[assignment]  # the field, as the API names it, not tuple.count
    nan: int
    pos_inf: int
    neg_inf: int
    time: float | None


@dataclass(frozen=True)
class Series:
    """A run's metric over a step range, in at most the asked number of step buckets."""

    run_id: str
    metric: str
    source: str | None  # None: the run has no such series
    actor: str | None
    step_min: int | None
    step_max: int | None
    total_points: int
    downsampled: bool
    bucket_steps: int
    rollup_only: bool  # drawn from rollups only: retention dropped the range's raw values
    points: tuple[SeriesPoint, ...]


@dataclass(frozen=True)
class BucketRow:
    """Token-probability bucket sums over a step range of one group ('all', a GPU, an actor)."""

    group: str
    basis: str
    lo: float
    hi: float
    tokens: float
    sum_d: float
    sum_abs_d: float
    sum_k3: float
    sum_reverse_k3: float
    oob: float
    steps: int
    actors: int


@dataclass(frozen=True)
class BucketStep:
    """One heatmap cell: a bucket's sums over a block of steps."""

    step: int
    step_end: int
    lo: float
    hi: float
    tokens: float
    sum_abs_d: float
    sum_k3: float
    oob: float
