"""Step buckets from partial aggregates, in NumPy: the pure core of every downsampled read.

A part is a rollup row (the summary of one block of steps) or a single raw value seen as the
summary of one step; every field merges exactly (min of mins, sums of sums, the last value by
step), so buckets built from any mix of parts equal buckets built from the raw values. Reads
fetch parts with plain scans and merge them here: a few vectorised passes over at most a few
thousand rows, cheaper than asking the database to aggregate again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FIELDS = (
    "step_lo",
    "step_hi",
    "vmin",
    "vmax",
    "vsum",
    "finite",
    "total",
    "last_step",
    "last_value",
    "last_time",
    "nan",
    "pos_inf",
    "neg_inf",
)


@dataclass(frozen=True)
class Parts:
    """Partial aggregates as columns (one array per field of `FIELDS`); NaN stands for a
    missing min/max (no finite value) or time."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["step_lo"])

    @classmethod
    def empty(cls) -> Parts:
        return cls({name: np.empty(0) for name in FIELDS})

    @classmethod
    def from_values(cls, steps: Any, values: Any, times: Any = None) -> Parts:
        """Single raw values as parts."""
        step = np.asarray(steps, dtype=np.int64)
        value = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(value)
        time = np.full(len(step), np.nan) if times is None else _floats(times)
        return cls(
            {
                "step_lo": step,
                "step_hi": step,
                "vmin": np.where(finite, value, np.nan),
                "vmax": np.where(finite, value, np.nan),
                "vsum": np.where(finite, value, 0.0),
                "finite": finite.astype(np.int64),
                "total": np.ones(len(step), dtype=np.int64),
                "last_step": step,
                "last_value": value,
                "last_time": time,
                "nan": np.isnan(value).astype(np.int64),
                "pos_inf": (value == np.inf).astype(np.int64),
                "neg_inf": (value == -np.inf).astype(np.int64),
            }
        )

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> Parts:
        """Rollup rows fetched as columns (NULLs as None or NaN)."""
        out = {}
        for name in FIELDS:
            column = columns[name]
            ints = name in ("step_lo", "step_hi", "finite", "total", "last_step", "nan")
            ints = ints or name in ("pos_inf", "neg_inf")
            out[name] = np.asarray(column, dtype=np.int64) if ints else _floats(column)
        return cls(out)

    @staticmethod
    def concat(parts: Sequence[Parts]) -> Parts:
        kept = [p for p in parts if len(p)]
        if not kept:
            return Parts.empty()
        return Parts({name: np.concatenate([p.columns[name] for p in kept]) for name in FIELDS})


def _floats(column: Any) -> np.ndarray:
    """A float column with None as NaN (DuckDB and PostgreSQL return NULL as None)."""
    array = np.asarray(column)
    if array.dtype == object:
        array = np.array([np.nan if v is None else v for v in column], dtype=np.float64)
    return array.astype(np.float64)


def buckets(parts: Parts, width: int) -> list[tuple[Any, ...]]:
    """Merge parts into buckets of `width` steps aligned to multiples of it: rows of (first
    step, last step, min, max, mean, last value, count, NaN, +Inf, −Inf, time of the last step),
    in step order; min/max/mean None where a bucket holds no finite value."""
    if not len(parts):
        return []
    c = parts.columns
    bucket = c["step_lo"] // width
    order = np.lexsort((c["last_step"], bucket))  # by bucket; within it, the last step last
    bucket = bucket[order]
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(bucket)] - 1
    col = {name: values[order] for name, values in c.items()}
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        vmin = np.fmin.reduceat(col["vmin"], starts)
        vmax = np.fmax.reduceat(col["vmax"], starts)
        finite = np.add.reduceat(col["finite"], starts)
        # each part's sum over the bucket's count, then added: the mean lies between min and
        # max, so it stays finite where the bucket's plain sum of values near 1e308 would not
        share = col["vsum"] / np.repeat(finite, np.diff(np.r_[starts, len(bucket)]))
        mean = np.add.reduceat(share, starts)
    none = finite == 0  # no finite value: min, max and mean are missing, not NaN
    columns = [
        np.minimum.reduceat(col["step_lo"], starts).tolist(),
        np.maximum.reduceat(col["step_hi"], starts).tolist(),
        _missing(vmin, none),
        _missing(vmax, none),
        _missing(mean, none),
        col["last_value"][ends].tolist(),
        *(np.add.reduceat(col[k], starts).tolist() for k in ("total", "nan", "pos_inf", "neg_inf")),
        _missing(col["last_time"][ends], np.isnan(col["last_time"][ends])),
    ]
    return list(zip(*columns, strict=True))


def _missing(values: np.ndarray, missing: np.ndarray) -> list[float | None]:
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(missing).tolist():
        out[i] = None
    return out
