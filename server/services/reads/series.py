"""The series read service: downsampled series (one, an overlay, a run page's grid), and the
token-probability bucket sums and heatmap cells.

Every read takes the reader's `ReadScope` first and returns read-models
(`server.domain.reads.series`); a series' points come as storage reads them (tuples in its
column order), so a read of thousands of buckets builds no object per bucket.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection

from server.domain.names import Resolution
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import BucketGroup, BucketRow, BucketStep, Series, SeriesPoint
from server.errors import Rejected
from server.services.reads.lookup import find, find_all
from server.storage.db import Database
from server.storage.reading import aggregates, series

MAX_POINTS_LIMIT = 100_000
MAX_GRID = 200  # series in one overlay or run-page read


class SeriesReads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def series(
        self,
        scope: ReadScope,
        run_id: str,
        metric: str,
        *,
        source: str | None = None,
        actor: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        bucket_steps: int | None = None,
        resolution: Resolution = "buckets",
    ) -> Series:
        if resolution == "full":
            max_points, bucket_steps = MAX_POINTS_LIMIT, 1
        check_range(step_min, step_max, max_points, bucket_steps)
        with self._db.read() as conn, _full_when(resolution == "full"):
            row = find(conn, run_id, scope.projects)
            source, heads = series.find(conn, row.pk, metric, source, actor)
            wanted = series.Wanted(
                row.pk, source, heads, step_min, step_max, max_points, bucket_steps
            )
            result = series.read(conn, [wanted])[0]
        found = series_of(run_id, metric, source, actor, step_min, step_max, result)
        return _whole([found], resolution)[0]

    def run_series(
        self,
        scope: ReadScope,
        run_id: str,
        metrics: Sequence[str],
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
    ) -> dict[str, Series]:
        """Several metrics of one run (each from its trainer side when it has one); the
        metrics the run lacks are left out."""
        found = self.series_grid(
            scope, [run_id], metrics, step_min=step_min, step_max=step_max, max_points=max_points
        )
        return {s.metric: s for s in found if s.source is not None}

    def series_grid(
        self,
        scope: ReadScope,
        run_ids: Sequence[str],
        metrics: Sequence[str],
        *,
        source: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        bucket_steps: int | None = None,
        resolution: Resolution = "buckets",
    ) -> list[Series]:
        """Each run's series of each metric, run by run in the order asked (an overlay is many
        runs × one metric, a run page one run × many), on one connection with one lookup of
        each run's series; a metric a run lacks comes back empty."""
        if not run_ids or not metrics:
            raise Rejected("give at least one run id in `runs` and one metric")
        if len(run_ids) * len(metrics) > MAX_GRID:
            raise Rejected(f"at most {MAX_GRID} series at once (runs × metrics)")
        if resolution == "full":
            max_points, bucket_steps = MAX_POINTS_LIMIT, 1
        check_range(step_min, step_max, max_points, bucket_steps)
        with self._db.read() as conn, _full_when(resolution == "full"):
            rows = find_all(conn, run_ids, scope.projects)
            found = read_grid(
                conn, rows, metrics, source, step_min, step_max, max_points, bucket_steps
            )
        return _whole(found, resolution)

    def buckets(
        self,
        scope: ReadScope,
        run_ids: Sequence[str],
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        group_by: BucketGroup = "none",
        basis: str = "rollout",
    ) -> list[BucketRow]:
        check_range(step_min, step_max, 1)
        with self._db.read() as conn:
            found = [find(conn, run_id, scope.projects) for run_id in run_ids]
            rows = aggregates.bucket_totals(
                conn,
                run_pks=[r.pk for r in found],
                dropped=[r.pk for r in found if r.raw_dropped_at is not None],
                step_min=step_min,
                step_max=step_max,
                group_by=group_by,
                basis=basis,
            )
        return [_bucket_row(r._mapping, basis) for r in rows]

    def bucket_steps(
        self,
        scope: ReadScope,
        run_id: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        basis: str = "rollout",
        max_points: int = 200,
    ) -> list[BucketStep]:
        check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects)
            rows = aggregates.bucket_blocks(
                conn,
                run_pk=row.pk,
                step_min=step_min,
                step_max=step_max,
                basis=basis,
                max_points=max_points,
                dropped=row.raw_dropped_at is not None,
            )
        return [_bucket_step(r._mapping) for r in rows]


@contextmanager
def _full_when(full: bool) -> Iterator[None]:
    """A full-resolution read too long for one answer, refused in the words of its fields."""
    try:
        yield
    except Rejected as exc:
        if not full or "max_points" not in exc.message:
            raise
        raise Rejected(
            f"resolution=full answers at most {MAX_POINTS_LIMIT} steps per series: narrow "
            "step_min/step_max, or read every value with GET /api/v1/export",
            detail={"field": "step_max"},
        ) from exc


def _whole(found: list[Series], resolution: Resolution) -> list[Series]:
    """`found`, when a full-resolution read got every raw value it asked for."""
    if resolution == "full":
        for s in found:
            if s.rollup_only:
                raise Rejected(
                    f"resolution=full: retention dropped the raw values of {s.run_id}/{s.metric} "
                    "in this range; only its roll-ups remain (resolution=buckets)",
                    detail={"field": "resolution"},
                )
    return found


def check_range(
    step_min: int | None, step_max: int | None, max_points: int, bucket_steps: int | None = None
) -> None:
    if step_min is not None and step_max is not None and step_min > step_max:
        raise Rejected(f"step_min ({step_min}) is greater than step_max ({step_max})")
    if not 1 <= max_points <= MAX_POINTS_LIMIT:
        raise Rejected(f"max_points must be between 1 and {MAX_POINTS_LIMIT}")
    if bucket_steps is not None and not 1 <= bucket_steps <= 2**53:
        raise Rejected("bucket_steps must be a positive number of steps")


def _bucket_row(r: Mapping[str, Any], basis: str) -> BucketRow:
    """A row of bucket sums (PostgreSQL sums as decimals: taken as floats and ints)."""
    return BucketRow(
        group=str(r["grp"]),
        basis=basis,
        lo=float(r["lo"]),
        hi=float(r["hi"]),
        tokens=float(r["tokens"]),
        sum_d=float(r["sum_d"]),
        sum_abs_d=float(r["sum_abs_d"]),
        sum_k3=float(r["sum_k3"]),
        sum_reverse_k3=float(r["sum_reverse_k3"]),
        oob=float(r["oob"]),
        steps=int(r["steps"]),
        actors=int(r["actors"]),
    )


def _bucket_step(r: Mapping[str, Any]) -> BucketStep:
    return BucketStep(
        step=int(r["step"]),
        step_end=int(r["step_end"]),
        lo=float(r["lo"]),
        hi=float(r["hi"]),
        tokens=float(r["tokens"]),
        sum_abs_d=float(r["sum_abs_d"]),
        sum_k3=float(r["sum_k3"]),
        oob=float(r["oob"]),
    )


def read_grid(
    conn: Connection,
    rows: Sequence[Any],
    metrics: Sequence[str],
    source: str | None,
    step_min: int | None,
    step_max: int | None,
    max_points: int,
    bucket_steps: int | None = None,
) -> list[Series]:
    """The series of each metric of each run (`rows`, as `lookup` finds them), run by run,
    with one lookup of their series; a metric a run lacks comes back empty."""
    found = series.find_many(conn, [r.pk for r in rows], metrics, source)
    grid = [(row, m, *found.get((row.pk, m), (source, []))) for row in rows for m in metrics]
    wanted = [
        series.Wanted(row.pk, side, heads, step_min, step_max, max_points, bucket_steps)
        for row, _, side, heads in grid
    ]
    results = series.read(conn, wanted)
    return [
        series_of(row.id, metric, side, None, step_min, step_max, result)
        for (row, metric, side, _), result in zip(grid, results, strict=True)
    ]


def series_of(
    run_id: str,
    metric: str,
    source: str | None,
    actor: str | None,
    step_min: int | None,
    step_max: int | None,
    result: series.SeriesResult,
) -> Series:
    """A storage read as a series (its blocks are in `SeriesPoint`'s field order)."""
    return Series(
        run_id,
        metric,
        source,
        actor,
        step_min,
        step_max,
        total_points=result.total_points,
        downsampled=result.width > 1,
        bucket_steps=result.width,
        rollup_only=result.rollup_only,
        points=tuple(map(SeriesPoint._make, result.blocks)),
    )
