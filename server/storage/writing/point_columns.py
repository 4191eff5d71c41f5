"""The values a group of batches appends, gathered as NumPy columns without a Python object per
value.

A batch decoded on the wire path holds its values in one float64 column, each record's metrics a
view of it (`server.domain.metric_rows`). A record whose values are all new — the common case —
adds a piece: its series as slots (one array per run, source, actor and set of metric names,
shared by every step that sends them), its step, its time and its stretch of the batch's column.
`build` joins the pieces: the stretches of consecutive records of one batch are one slice of its
column (no copy); each value refers to its series and its record by an int32 each, and the
database joins them back (`appends.points`). Values that arrive as a dict (a batch the models
parsed, a record merged from two) are added as small arrays of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from server.domain.metric_rows import MetricColumn, MetricNames, MetricRow

SeriesKey = tuple[int, str, str, str]  # (run pk, source, actor, metric)
Base = tuple[int, str, str]  # (run pk, source, actor)
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Slots = npt.NDArray[np.int32]
T = TypeVar("T", bound=np.generic)


@dataclass(frozen=True, slots=True)
class Points:
    """Values with their series and step by reference: value `i` belongs to the series
    `series[slots[i]]` and to the step record `records[i]`, taken at `steps[records[i]]` and
    `times[records[i]]`. Two int32 a value beside the value itself, where the series id, step and
    time spelled out would be three 8-byte columns; `spelled` spells a stretch of them out."""

    values: Floats
    slots: Slots
    records: Slots
    series: Ints
    steps: Ints
    times: Floats

    def __len__(self) -> int:
        return len(self.values)

    def spelled(self, part: slice) -> tuple[Ints, Ints, Floats, Floats]:
        """Series id, step, value and time of each value of `part`."""
        records = self.records[part]
        return (
            self.series[self.slots[part]],
            self.steps[records],
            self.values[part],
            self.times[records],
        )


def series_keys(records: Iterable[tuple[Base, Mapping[str, float]]]) -> set[SeriesKey]:
    """The series that records of (run pk, source, actor) with these metrics write: the names of
    a `MetricRow` are looked at once per run, source, actor and set of names, not per step."""
    keys: set[SeriesKey] = set()
    seen: set[tuple[Base, MetricNames]] = set()
    for base, metrics in records:
        if isinstance(metrics, MetricRow):
            shape = (base, metrics.layout)
            if shape in seen:
                continue
            seen.add(shape)
        keys.update((*base, name) for name in metrics)
    return keys


class PointColumns:
    """Pieces of the columns, one per record (see module); `size` is the values added so far."""

    def __init__(self, series_ids: Mapping[SeriesKey, int]) -> None:
        self._series_ids = series_ids
        self._slots_of: dict[tuple[Base, MetricNames], Slots] = {}
        self._slot: dict[int, int] = {}  # series id: its slot
        self._slots: list[Slots] = []
        self._values: list[Floats | tuple[MetricColumn, int, int]] = []
        self._steps: list[int] = []
        self._times: list[float] = []
        self._counts: list[int] = []
        self.size = 0

    def add_row(self, base: Base, step: int, time: float, row: MetricRow) -> None:
        """Every value of `row` (a record's metrics as decoded), at `step` and `time`."""
        shape = (base, row.layout)
        slots = self._slots_of.get(shape)
        if slots is None:
            slots = self._slots_of[shape] = self._series_of(base, row.layout.names)
        self._add(slots, step, time, (row.column, row.start, row.stop))

    def add(self, base: Base, step: int, time: float, metrics: Mapping[str, float]) -> None:
        """The values of `metrics` (any mapping of name to float), at `step` and `time`."""
        if not metrics:
            return
        slots = self._series_of(base, metrics)
        self._add(slots, step, time, np.fromiter(metrics.values(), np.float64, len(metrics)))

    def _series_of(self, base: Base, names: Iterable[str]) -> Slots:
        """The slots of the series of `names`, a slot given to each series not seen yet."""
        ids = [self._series_ids[(*base, name)] for name in names]
        return np.array([self._slot.setdefault(sid, len(self._slot)) for sid in ids], np.int32)

    def _add(
        self, slots: Slots, step: int, time: float, values: Floats | tuple[MetricColumn, int, int]
    ) -> None:
        if not len(slots):
            return
        self._slots.append(slots)
        self._values.append(values)
        self._steps.append(step)
        self._times.append(time)
        self._counts.append(len(slots))
        self.size += len(slots)

    def build(self) -> Points:
        """The columns; the pieces are dropped as they are joined."""
        counts = np.array(self._counts, dtype=np.int64)
        self._counts = []
        records = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        slots = _joined(self._slots, np.int32)
        self._slots = []
        values = _joined(list(_slices(self._values)), np.float64)
        self._values = []
        series = np.fromiter(self._slot, np.int64, len(self._slot))  # in slot order
        steps = np.array(self._steps, dtype=np.int64)
        times = np.array(self._times, dtype=np.float64)
        self._steps, self._times = [], []
        return Points(values, slots, records, series, steps, times)


def _slices(pieces: list[Floats | tuple[MetricColumn, int, int]]) -> Iterable[Floats]:
    """The pieces of the value column as arrays: the stretches of one batch's column that
    follow each other become one view of it."""
    run: tuple[MetricColumn, int, int] | None = None
    for piece in pieces:
        if isinstance(piece, tuple):
            if run is not None and piece[0] is run[0] and piece[1] == run[2]:
                run = (run[0], run[1], piece[2])
                continue
            if run is not None:
                yield _view(run)
            run = piece
            continue
        if run is not None:
            yield _view(run)
            run = None
        yield piece
    if run is not None:
        yield _view(run)


def _view(stretch: tuple[MetricColumn, int, int]) -> Floats:
    column, start, stop = stretch
    return np.frombuffer(column.values, dtype=np.float64)[start:stop]


def _joined(parts: Sequence[npt.NDArray[T]], dtype: type[T]) -> npt.NDArray[T]:
    """One array of the parts: the part itself when there is one (no copy)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate(parts)
