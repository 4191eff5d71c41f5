"""The values a group of batches appends, gathered as four NumPy columns without a Python object
per value.

A batch decoded on the wire path holds its values in one float64 column, each record's metrics a
view of it (`server.domain.metric_rows`). A record whose values are all new — the common case —
adds a piece: its series ids (one array per run, source, actor and set of metric names, shared by
every step that sends them), its step, its time and its stretch of the batch's column. `build`
joins the pieces: the stretches of consecutive records of one batch are one slice of its column
(no copy), steps and times are repeated per value. Values that arrive as a dict (a batch the
models parsed, a record merged from two) are added as small arrays of their own.
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
    """Four aligned columns: series id, step, value and wall time of each value; and each
    value's series as a slot of `series` (its distinct ids), to fold per series without
    sorting."""

    series_ids: Ints
    steps: Ints
    values: Floats
    times: Floats
    series: Ints
    slots: Slots

    def __len__(self) -> int:
        return len(self.values)


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
        self._ids_of: dict[tuple[Base, MetricNames], tuple[Ints, Slots]] = {}
        self._slot: dict[int, int] = {}  # series id: its slot
        self._sids: list[Ints] = []
        self._slots: list[Slots] = []
        self._values: list[Floats | tuple[MetricColumn, int, int]] = []
        self._steps: list[int] = []
        self._times: list[float] = []
        self._counts: list[int] = []
        self.size = 0

    def add_row(self, base: Base, step: int, time: float, row: MetricRow) -> None:
        """Every value of `row` (a record's metrics as decoded), at `step` and `time`."""
        shape = (base, row.layout)
        known = self._ids_of.get(shape)
        if known is None:
            known = self._ids_of[shape] = self._series_of(base, row.layout.names)
        self._add(*known, step, time, (row.column, row.start, row.stop))

    def add(self, base: Base, step: int, time: float, metrics: Mapping[str, float]) -> None:
        """The values of `metrics` (any mapping of name to float), at `step` and `time`."""
        if not metrics:
            return
        ids, slots = self._series_of(base, metrics)
        values = np.fromiter(metrics.values(), np.float64, len(metrics))
        self._add(ids, slots, step, time, values)

    def _series_of(self, base: Base, names: Iterable[str]) -> tuple[Ints, Slots]:
        ids = [self._series_ids[(*base, name)] for name in names]
        slots = [self._slot.setdefault(sid, len(self._slot)) for sid in ids]
        return np.array(ids, dtype=np.int64), np.array(slots, dtype=np.int32)

    def _add(
        self,
        ids: Ints,
        slots: Slots,
        step: int,
        time: float,
        values: Floats | tuple[MetricColumn, int, int],
    ) -> None:
        if not len(ids):
            return
        self._sids.append(ids)
        self._slots.append(slots)
        self._values.append(values)
        self._steps.append(step)
        self._times.append(time)
        self._counts.append(len(ids))
        self.size += len(ids)

    def build(self) -> Points:
        """The columns; the pieces are dropped as they are joined."""
        counts = np.array(self._counts, dtype=np.int64)
        steps = np.repeat(np.array(self._steps, dtype=np.int64), counts)
        self._steps = []
        times = np.repeat(np.array(self._times, dtype=np.float64), counts)
        self._times = []
        sids = _joined(self._sids, np.int64)
        self._sids = []
        slots = _joined(self._slots, np.int32)
        self._slots = []
        values = _joined(list(_slices(self._values)), np.float64)
        self._values = []
        series = np.fromiter(self._slot, np.int64, len(self._slot))  # in slot order
        return Points(sids, steps, values, times, series, slots)


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
