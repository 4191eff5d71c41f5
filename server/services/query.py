"""The query layer: the one way the API routes and the dashboard read stored data.

Returns the `…Out` models of `server/schemas/query.py`. Access control (which projects a caller
may read) is passed in as `projects`; None means every project. Runs, summaries and trends are
in `runs_query.py`, hardware in `hardware_query.py`; the series and bucket reads here.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.errors import Rejected
from server.schemas.query import BucketRowOut, BucketStepOut, SeriesOut
from server.services.hardware_query import HardwareQueries
from server.storage import aggregates, series
from server.storage.aggregates import GroupBy

MAX_POINTS_LIMIT = 100_000
MAX_GRID = 200  # series in one overlay or run-page read


class QueryService(HardwareQueries):
    # -- series -----------------------------------------------------------------------------
    def series(
        self,
        run_id: str,
        metric: str,
        *,
        source: str | None = None,
        actor: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        bucket_steps: int | None = None,
        projects: Sequence[str] | None = None,
    ) -> SeriesOut:
        check_range(step_min, step_max, max_points, bucket_steps)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            source, heads = series.find(conn, row.pk, metric, source, actor)
            wanted = series.Wanted(
                row.pk, source, heads, step_min, step_max, max_points, bucket_steps
            )
            result = series.read(conn, [wanted])[0]
        return _series_out(run_id, metric, source, actor, step_min, step_max, result)

    def run_series(
        self,
        run_id: str,
        metrics: Sequence[str],
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        bucket_steps: int | None = None,
        projects: Sequence[str] | None = None,
    ) -> dict[str, SeriesOut]:
        """Several metrics of one run (each from its trainer side when it has one): what a run
        page draws; the metrics the run lacks are left out."""
        found = self.series_grid(
            [run_id],
            metrics,
            step_min=step_min,
            step_max=step_max,
            max_points=max_points,
            bucket_steps=bucket_steps,
            projects=projects,
        )
        return {s.metric: s for s in found if s.source is not None}

    def series_grid(
        self,
        run_ids: Sequence[str],
        metrics: Sequence[str],
        *,
        source: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        bucket_steps: int | None = None,
        projects: Sequence[str] | None = None,
    ) -> list[SeriesOut]:
        """Each run's series of each metric, run by run in the order asked (an overlay is many
        runs × one metric, a run page one run × many), on one connection with one lookup of
        each run's series; a metric a run lacks comes back empty."""
        if not run_ids or not metrics:
            raise Rejected("give at least one run id in `runs` and one metric")
        if len(run_ids) * len(metrics) > MAX_GRID:
            raise Rejected(f"at most {MAX_GRID} series at once (runs × metrics)")
        check_range(step_min, step_max, max_points, bucket_steps)
        with self._db.read() as conn:
            rows = self._runs(conn, run_ids, projects)
            found = series.find_many(conn, [r.pk for r in rows], metrics, source)
            grid = [
                (row, m, *found.get((row.pk, m), (source, []))) for row in rows for m in metrics
            ]
            wanted = [
                series.Wanted(row.pk, side, heads, step_min, step_max, max_points, bucket_steps)
                for row, _, side, heads in grid
            ]
            results = series.read(conn, wanted)
        out = [
            _series_out(row.id, metric, side, None, step_min, step_max, result)
            for (row, metric, side, _), result in zip(grid, results, strict=True)
        ]
        return out

    # -- buckets and hardware ---------------------------------------------------------------
    def buckets(
        self,
        run_ids: Sequence[str],
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        group_by: GroupBy = "none",
        basis: str = "rollout",
        projects: Sequence[str] | None = None,
    ) -> list[BucketRowOut]:
        check_range(step_min, step_max, 1)
        with self._db.read() as conn:
            found = [self._run(conn, run_id, projects) for run_id in run_ids]
            rows = aggregates.bucket_totals(
                conn,
                run_pks=[r.pk for r in found],
                dropped=[r.pk for r in found if r.raw_dropped_at is not None],
                step_min=step_min,
                step_max=step_max,
                group_by=group_by,
                basis=basis,
            )
        return [
            BucketRowOut.model_validate({**r._mapping, "group": str(r.grp), "basis": basis})
            for r in rows
        ]

    def bucket_steps(
        self,
        run_id: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        basis: str = "rollout",
        max_points: int = 200,
        projects: Sequence[str] | None = None,
    ) -> list[BucketStepOut]:
        check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            rows = aggregates.bucket_blocks(
                conn,
                run_pk=row.pk,
                step_min=step_min,
                step_max=step_max,
                basis=basis,
                max_points=max_points,
                dropped=row.raw_dropped_at is not None,
            )
        return [BucketStepOut.model_validate(r._mapping) for r in rows]


def check_range(
    step_min: int | None, step_max: int | None, max_points: int, bucket_steps: int | None = None
) -> None:
    if step_min is not None and step_max is not None and step_min > step_max:
        raise Rejected(f"step_min ({step_min}) is greater than step_max ({step_max})")
    if not 1 <= max_points <= MAX_POINTS_LIMIT:
        raise Rejected(f"max_points must be between 1 and {MAX_POINTS_LIMIT}")
    if bucket_steps is not None and not 1 <= bucket_steps <= 2**53:
        raise Rejected("bucket_steps must be a positive number of steps")


def _series_out(
    run_id: str,
    metric: str,
    source: str | None,
    actor: str | None,
    step_min: int | None,
    step_max: int | None,
    result: series.SeriesResult,
) -> SeriesOut:
    points = [dict(zip(series.BLOCK_FIELDS, block, strict=True)) for block in result.blocks]
    # One validation of plain dicts: far cheaper than a model constructor per point.
    return SeriesOut.model_validate(
        {
            "run_id": run_id,
            "metric": metric,
            "source": source,
            "actor": actor,
            "step_min": step_min,
            "step_max": step_max,
            "total_points": result.total_points,
            "downsampled": result.width > 1,
            "bucket_steps": result.width,
            "rollup_only": result.rollup_only,
            "points": points,
        }
    )
