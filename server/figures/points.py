"""What the curve figures take: a series' step buckets as points, the notes and alert marks
drawn over them."""

from __future__ import annotations

from typing import Any, NamedTuple

from server.domain.reads.series import Series, SeriesPoint

Point = dict[str, Any]
"""A step bucket as a chart reads it: `SeriesPoint`'s fields by name (and an `x` where
`dashboard.alignment` placed it)."""


def points(series: Series | None) -> list[Point]:
    """A series' step buckets as the figures take them (none for a series a run lacks)."""
    fields = SeriesPoint._fields
    return [] if series is None else [dict(zip(fields, p, strict=True)) for p in series.points]


class Note(NamedTuple):
    """An annotation drawn on a chart: a dashed line at its step, its text on hover."""

    step: int | None
    kind: str
    text: str


class Mark(NamedTuple):
    """An alert drawn on a chart: a marker at its step."""

    step: int
    rule: str
    state: str
