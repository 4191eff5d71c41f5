"""Exports: every stored value of chosen series, in bounded reads, as Arrow record batches.

An export reads the raw values (`points` and `points_hot`), never the rollups, so it gives back
exactly what was stored — every step, NaN and ±Inf included. Its cost is what it returns: the
series come from the heads (`series`), and each read names its series and step range, so it
touches only those series' blocks.

Memory is bounded per read, not per export: `plan_reads` packs series into reads of at most
`budget` values by their heads' point counts (a series holds at most one value per step, so a
series longer than the budget is read in windows of `budget` steps). A read's rows come back
ordered by the plan's series order, then step, and are handed on in batches of at most
`BATCH_ROWS` rows (slices of the read: what a client holds at a time).

How much one read holds differs by database (`READ_VALUES`). DuckDB skips storage a row group
(122,880 values) at a time, and a row group holds one metric's series of about a dozen
neighbouring runs (`points` is sorted by metric, series, step): a read of one run's series
scans a row group per metric for a few of its values. A read of a few neighbouring runs shares
those row groups, so larger reads scan less for the same values (the export benchmark's 25.6 M
values: 2.0 s in reads of 2**18 values, 1.0 s of 2**19, 0.8 s of 2**20, whose server held
about 70 MiB more than at 2**19). PostgreSQL reads each series by its index, about as fast in
any size, and hands rows over as Python tuples, which small reads keep small.

Values that retention dropped (`series.raw_dropped_until`) are no longer raw: an export does not
hold them (their roll-ups still draw the run's charts).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql
from server.storage.schema import tables as t

BATCH_ROWS = 1 << 18  # rows per batch handed on: ~9 MiB as Arrow
READ_VALUES = {"duckdb": 1 << 19, "postgresql": 1 << 18}  # values per read: see above

LABELS = ("project", "run_id", "source", "actor", "metric")

SCHEMA = pa.schema(
    [
        *(
            pa.field(name, pa.dictionary(pa.int32(), pa.string()), nullable=False)
            for name in LABELS
        ),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ],
    metadata={"mismatch.export": "1"},
)
"""Long form: one row per stored value. The labels are dictionaries that stay the same for a
whole export (one copy of each run id or metric name, not one per row)."""


@dataclass(frozen=True)
class Head:
    """One series to export, with its labels and how many values it holds."""

    series_id: int
    metric_id: int
    project: str
    run_id: str
    source: str
    actor: str
    metric: str
    points: int
    first_step: int
    last_step: int


@dataclass(frozen=True)
class Read:
    """One bounded read: several series (in output order) over one step range."""

    heads: tuple[Head, ...]
    step_lo: int
    step_hi: int


def heads(
    conn: Connection,
    runs: Sequence[Any],
    *,
    metrics: Sequence[str] | None = None,
    source: str | None = None,
) -> list[Head]:
    """The series of `runs` (rows with pk, id, project) that hold values, in the order of the
    runs, then metric, source, actor; only `metrics` and `source` when given."""
    if not runs:
        return []
    s = t.series.c
    query = sa.select(
        s.id, s.metric_id, s.run_pk, s.source, s.actor, s.metric, s.points, s.first_step,
        s.last_step,
    ).where(s.run_pk.in_([r.pk for r in runs]), s.points > 0)  # fmt: skip
    if metrics is not None:
        query = query.where(s.metric.in_(list(metrics)))
    if source is not None:
        query = query.where(s.source == source)
    order = {r.pk: i for i, r in enumerate(runs)}
    by_pk = {r.pk: r for r in runs}
    found = sorted(
        conn.execute(query).all(), key=lambda h: (order[h.run_pk], h.metric, h.source, h.actor)
    )
    return [
        Head(
            int(h.id),
            int(h.metric_id),
            by_pk[h.run_pk].project,
            by_pk[h.run_pk].id,
            h.source,
            h.actor,
            h.metric,
            int(h.points),
            int(h.first_step),
            int(h.last_step),
        )
        for h in found
    ]


def plan_reads(
    found: Sequence[Head], step_min: int | None, step_max: int | None, budget: int
) -> list[Read]:
    """Reads of at most `budget` values each, covering `found` over [step_min, step_max]."""
    lo_all = step_min if step_min is not None else 0
    hi_all = step_max if step_max is not None else 2**62
    reads: list[Read] = []
    pack: list[Head] = []
    packed = 0
    for h in found:
        lo, hi = max(lo_all, h.first_step), min(hi_all, h.last_step)
        if lo > hi:
            continue
        if h.points > budget:  # one long series: windows of `budget` steps
            for start in range(lo, hi + 1, budget):
                reads.append(Read((h,), start, min(hi, start + budget - 1)))
            continue
        if pack and packed + h.points > budget:
            reads.append(Read(tuple(pack), lo_all, hi_all))
            pack, packed = [], 0
        pack.append(h)
        packed += h.points
    if pack:
        reads.append(Read(tuple(pack), lo_all, hi_all))
    return reads


def count(found: Sequence[Head]) -> int:
    """Values the heads hold (over their whole range): an upper bound of an export's rows."""
    return sum(h.points for h in found)


@dataclass(frozen=True)
class Dictionaries:
    """The labels' dictionaries of one export, and each series' codes into them."""

    values: dict[str, pa.Array]
    codes: dict[int, tuple[int, ...]]  # series id → one code per label

    @classmethod
    def of(cls, found: Sequence[Head]) -> Dictionaries:
        index: dict[str, dict[str, int]] = {name: {} for name in LABELS}
        codes: dict[int, tuple[int, ...]] = {}
        for h in found:
            codes[h.series_id] = tuple(
                index[name].setdefault(getattr(h, name), len(index[name])) for name in LABELS
            )
        values = {name: pa.array(list(index[name]), pa.string()) for name in LABELS}
        return cls(values, codes)


_READ = (
    "SELECT series_id, step, value FROM points "
    "WHERE metric_id IN :metric_ids AND series_id IN :sids AND step BETWEEN :lo AND :hi "
    "UNION ALL SELECT series_id, step, value FROM points_hot "
    "WHERE series_id IN :sids AND step BETWEEN :lo AND :hi"
)


def read(conn: Connection, one: Read, labels: Dictionaries) -> pa.RecordBatch:
    """The values of one planned read as a batch of `SCHEMA`, in the plan's series order, then
    step. One statement reads both tables, so a compaction between reads never moves a value
    out of sight or into a read twice."""
    sids = [h.series_id for h in one.heads]
    params: dict[str, Any] = {
        "sids": sids,
        "metric_ids": sorted({h.metric_id for h in one.heads}),
        "lo": one.step_lo,
        "hi": one.step_hi,
    }
    columns = _fetch(conn, params)
    ranks = _ranks(np.asarray(columns.pop("series_id"), dtype=np.int64), np.array(sids))
    steps, values = _in_order(
        ranks,
        np.asarray(columns.pop("step"), dtype=np.int64),
        np.asarray(columns.pop("value"), dtype=np.float64),
    )
    counts = np.bincount(ranks, minlength=len(sids))
    del ranks
    codes = np.array([labels.codes[sid] for sid in sids], dtype=np.int32)
    arrays: list[pa.Array] = [
        pa.DictionaryArray.from_arrays(pa.array(np.repeat(codes[:, i], counts)), labels.values[n])
        for i, n in enumerate(LABELS)
    ]
    arrays += [pa.array(steps), pa.array(values)]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def _ranks(sids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each row's series as its place in the plan (`wanted`)."""
    if not len(sids):
        return np.zeros(0, dtype=np.int32)
    lo, hi = int(wanted.min()), int(wanted.max())
    if hi - lo < 1 << 24:  # series ids are a sequence: a lookup table
        table = np.zeros(hi - lo + 1, dtype=np.int32)
        table[wanted - lo] = np.arange(len(wanted))
        found: np.ndarray = table[sids - lo]
        return found
    sorter = np.argsort(wanted)
    placed: np.ndarray = sorter[np.searchsorted(wanted, sids, sorter=sorter)].astype(np.int32)
    return placed


def _in_order(
    ranks: np.ndarray, steps: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows' steps and values ordered by (rank, step).

    The rows arrive as stretches of one series in ascending steps (compacted values sit sorted
    by series and step in their chunks; a series spans a stretch per chunk). Those stretches
    are put in order, and the rows copied stretch by stretch: about a third of the time of
    sorting every row. Where stretches are short (hot values arrive step by step, every
    series in turn) or a series' stretches overlap (a late value of an old step), every row is
    sorted instead."""
    n = len(steps)
    cut = np.flatnonzero((ranks[1:] != ranks[:-1]) | (steps[1:] <= steps[:-1])) + 1
    if n == 0 or len(cut) * 64 > n:
        order = _order(ranks, steps)
        return steps[order], values[order]
    starts, ends = np.concatenate(([0], cut)), np.concatenate((cut, [n]))
    by = np.lexsort((steps[starts], ranks[starts]))
    starts, ends = starts[by], ends[by]
    same = ranks[starts[1:]] == ranks[starts[:-1]]
    if np.any(same & (steps[starts[1:]] <= steps[ends[:-1] - 1])):
        order = _order(ranks, steps)
        return steps[order], values[order]
    stretches = list(zip(starts.tolist(), ends.tolist(), strict=True))
    return (
        np.concatenate([steps[a:b] for a, b in stretches]),
        np.concatenate([values[a:b] for a, b in stretches]),
    )


def _order(ranks: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The rows' order by (rank, step), sorting every row: a stable sort (timsort) of one
    combined key, about linear where the rows come in sorted stretches."""
    if not len(steps):
        return np.zeros(0, dtype=np.int64)
    first = int(steps.min())
    span = int(steps.max()) - first + 1
    if span * (int(ranks.max()) + 1) >= 1 << 62:
        by_two: np.ndarray = np.lexsort((steps, ranks))
        return by_two
    by_key: np.ndarray = np.argsort(ranks.astype(np.int64) * span + (steps - first), kind="stable")
    return by_key


def _fetch(conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """The read's columns: NumPy arrays from DuckDB, the driver's tuples from PostgreSQL."""
    return sql.fetch_numbers(conn, sql.text(_READ, "sids", "metric_ids"), params)


def batches(
    connect: Any, reads: Sequence[Read], labels: Dictionaries, rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Each planned read, on a connection of its own (`connect()` is a context manager giving
    one), in batches of at most `rows` rows: a slow consumer holds no connection between
    reads."""
    for one in reads:
        with connect() as conn:
            whole = read(conn, one, labels)
        for first in range(0, whole.num_rows, rows):
            yield whole.slice(first, rows)
