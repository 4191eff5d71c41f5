"""What a hardware read knows of a metric in some runs before it compares anything: its pieces
(a series on one GPU type over a step range) with their counts and sums, the per-GPU
distribution (quantiles exact up to `QUANTILE_VALUES` values, of a sample beyond), and the
values a bootstrap resamples — all read through `server.storage.reading.hardware`, which does the
work in the database. What reaches Python is a few rows per series and at most
`comparison.VALUES_PER_GPU` values per GPU type.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from server.analysis.comparison import VALUES_PER_GPU, Piece
from server.analysis.hardware import UNKNOWN_GPU
from server.analysis.ratios import MAX_STEPS_PER_RUN
from server.domain.reads.hardware import HardwareRow
from server.storage.db import Database
from server.storage.reading import hardware
from server.storage.reading.hardware import Piece as SeriesPiece
from server.storage.reading.hardware import Stats

QUANTILE_WORKERS = 4  # GPU types sorted at once on PostgreSQL
QUANTILE_VALUES = 20_000
"""A GPU type holding more finite values than this gets its quantiles from a sample of about
this many: the p05 of 20,000 values sits within ±0.15 percentile points of the whole's (its
rank's standard error), finer than a box plot shows, and the read then costs what the view
shows, not what years of history hold (`benchmarks/scale.py`: the same cost at 16 and 64 runs)."""
QUANTILE_WINDOWS = 16
"""Windows of consecutive steps per series in that sample, evenly spaced over the series: a
run's early, middle and late values all count, each window one range read of the index."""


@dataclass(frozen=True)
class Measured:
    """The pieces of a metric in some runs (a series on one GPU over a step range) with what
    their values hold."""

    metric: str
    metric_id: int
    items: list[tuple[SeriesPiece, Stats]]

    def of_runs(self, run_pks: set[int]) -> Measured:
        kept = [(p, st) for p, st in self.items if p.run_pk in run_pks]
        return Measured(self.metric, self.metric_id, kept)


def measure(conn: Connection, metric: str, run_pks: Sequence[int]) -> Measured:
    metric_id, found = hardware.pieces(conn, metric, run_pks)
    return Measured(
        metric, metric_id, list(zip(found, hardware.stats(conn, metric_id, found), strict=True))
    )


def with_values(measured: Measured, keys: dict[int, str]) -> list[tuple[str, str]]:
    """The (run, GPU type) pairs that hold finite values, in run and GPU order, once each."""
    seen: dict[tuple[str, str], None] = {}
    for piece, stats in measured.items:
        if stats.finite and piece.gpu not in (None, UNKNOWN_GPU):
            seen.setdefault((keys[piece.run_pk], str(piece.gpu)), None)
    return list(seen)


def unknown_gpu(run: str) -> str:
    """The box of a run's steps on no known GPU type: its own, never pooled with another run's
    (two runs of unknown GPU type need not share one)."""
    return f"{UNKNOWN_GPU} GPU ({run})"


def distribution(
    db: Database, conn: Connection, measured: Measured, runs: Mapping[int, str]
) -> list[HardwareRow]:
    """Per GPU type: runs, actors, counts, min, max and mean of the metric's values in the
    measured pieces, and their quantiles — exact up to `QUANTILE_VALUES` finite values, else
    of `QUANTILE_WINDOWS` step windows per series holding about that many. Steps on no known
    GPU type make a row per run (`unknown_gpu`, `runs` naming each run by its key)."""
    by_gpu: dict[str, list[tuple[SeriesPiece, Stats]]] = {}
    for piece, stats in measured.items:
        if stats.finite or stats.nonfinite:
            known = piece.gpu not in (None, "", UNKNOWN_GPU)
            gpu = str(piece.gpu) if known else unknown_gpu(runs[piece.run_pk])
            by_gpu.setdefault(gpu, []).append((piece, stats))
    groups = {
        g: hardware.windows(
            [(p, st.finite) for p, st in items if st.finite], QUANTILE_VALUES, QUANTILE_WINDOWS
        )
        for g, items in by_gpu.items()
    }
    if db.is_duckdb or len(groups) < 2:
        found = hardware.quantiles(conn, db.dialect, measured.metric_id, groups)
    else:
        found = _quantiles_apart(db, measured.metric_id, groups)
    out = []
    for gpu in sorted(by_gpu):
        items = by_gpu[gpu]
        finite = [(p, st) for p, st in items if st.finite]
        p05, q1, median, q3, p95 = found[gpu].values
        steps = sum(st.finite for _, st in items)
        out.append(
            HardwareRow(
                gpu=gpu,
                metric=measured.metric,
                runs=len({p.run_pk for p, _ in items}),
                actors=len({p.sid for p, _ in items}),
                steps=steps,
                nonfinite=sum(st.nonfinite for _, st in items),
                min=min((st.min for _, st in finite if st.min is not None), default=None),
                p05=p05,
                q1=q1,
                median=median,
                q3=q3,
                p95=p95,
                max=max((st.max for _, st in finite if st.max is not None), default=None),
                mean=sum(st.sum for _, st in finite) / steps if steps else None,
                quantiles_from=found[gpu].count,
            )
        )
    return out


def _quantiles_apart(
    db: Database, metric_id: int, groups: dict[str, list[SeriesPiece]]
) -> dict[str, hardware.Quantiles]:
    """PostgreSQL: each GPU type's quantiles in a connection (a backend process) of its own, at
    the same time: a sort uses one core, and there is one sort per GPU type."""

    def one(group: tuple[str, list[SeriesPiece]]) -> dict[str, hardware.Quantiles]:
        with db.read() as conn:
            return hardware.quantiles(conn, db.dialect, metric_id, dict([group]))

    found: dict[str, hardware.Quantiles] = {}
    with ThreadPoolExecutor(max_workers=min(QUANTILE_WORKERS, len(groups))) as pool:
        for part in pool.map(one, groups.items()):
            found.update(part)
    return found


def bootstrap_pieces(
    conn: Connection, group: Measured, rows: Sequence[Any], keys: dict[int, str]
) -> list[Piece]:
    """Each run's finite values per known GPU type, in step order, at the steps the bootstrap
    keeps of them: one stride for every run that keeps the longest near `MAX_STEPS_PER_RUN`
    values, times a factor per (run, GPU type) that leaves it its share of `VALUES_PER_GPU`
    (the thinning `comparison.pairs` would do, done before reading instead of after)."""
    if not rows:
        return []
    longest = max((r.last_step or 0) for r in rows) + 1
    stride = max(1, math.ceil(longest / MAX_STEPS_PER_RUN))
    finite: dict[tuple[int, str], int] = {}
    for piece, stats in group.items:
        if stats.finite and piece.gpu not in (None, UNKNOWN_GPU):
            key = (piece.run_pk, str(piece.gpu))
            finite[key] = finite.get(key, 0) + stats.finite
    per_gpu = Counter(gpu for _, gpu in finite)
    strides = {
        key: stride * math.ceil(math.ceil(n / stride) / _share(per_gpu[key[1]]))
        for key, n in finite.items()
    }
    asked = [
        (p, strides[(p.run_pk, str(p.gpu))])
        for p, stats in group.items
        if stats.finite and (p.run_pk, str(p.gpu)) in strides
    ]
    columns = hardware.piece_values(conn, group.metric_id, asked)
    gpu = np.asarray(columns["gpu"], dtype=object)
    run_pk = np.asarray(columns["run_pk"], dtype=np.int64)
    value = np.asarray(columns["value"], dtype=np.float64)
    if value.size == 0:
        return []
    # Rows come ordered by run, GPU, step: each change of (run, GPU) starts a piece.
    change = np.flatnonzero((run_pk[1:] != run_pk[:-1]) | (gpu[1:] != gpu[:-1])) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [value.size]])
    return [
        Piece(keys[int(run_pk[s])], str(gpu[s]), value[s:e])
        for s, e in zip(starts, ends, strict=True)
    ]


def _share(pieces: int) -> int:
    """Values each of a GPU type's pieces keeps (as `comparison.pairs` bounds them)."""
    return max(2, min(MAX_STEPS_PER_RUN, VALUES_PER_GPU // pieces))
