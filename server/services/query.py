"""The query layer: the one way the API routes and the dashboard read stored data.

Returns the `…Out` models of `server/schemas/query.py`. Access control (which projects a caller
may read) is passed in as `projects`; None means every project.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from server.domain.labels import InvalidLabelFilter, LabelFilter, parse_optional
from server.domain.metrics import HEADLINE, LATEST
from server.domain.names import RunStatus
from server.errors import NotFound, Rejected
from server.schemas.query import (
    ActorOut,
    AnnotationOut,
    BucketRowOut,
    BucketStepOut,
    HardwareOut,
    MetricOut,
    RunConfigOut,
    RunDetailOut,
    RunPageOut,
    RunSummaryOut,
    SeriesOut,
)
from server.storage import aggregates, notes, run_pages, runs, series, trends
from server.storage.aggregates import GroupBy
from server.storage.db import Database
from server.storage.run_pages import Cursor, RunFilter, Sort

MAX_POINTS_LIMIT = 100_000
MAX_OVERLAY = 50


class QueryService:
    def __init__(self, db: Database, *, live_window_s: float = 120.0) -> None:
        self._db = db
        self._live_window_s = live_window_s

    # -- runs -------------------------------------------------------------------------------
    def projects(self, *, projects: Sequence[str] | None = None) -> list[str]:
        with self._db.read() as conn:
            names = runs.projects(conn)
        return [n for n in names if projects is None or n in projects]

    def runs_page(
        self,
        *,
        project: str | None = None,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        sort: Sort = "activity",
        descending: bool = True,
        cursor: str | None = None,
        limit: int = 50,
        projects: Sequence[str] | None = None,
    ) -> RunPageOut:
        """One page of runs, filtered and sorted in the database; `cursor` continues a paging."""
        filters = RunFilter(project, projects, _label_filter(label), tag, text)
        after = Cursor.decode(cursor) if cursor else None
        with self._db.read() as conn:
            page = run_pages.page(
                conn, filters=filters, sort=sort, descending=descending, after=after, limit=limit
            )
            data = self._summaries(conn, page.rows)
        return RunPageOut(
            data=data,
            count=len(data),
            total=page.total,
            next_cursor=page.next.encode() if page.next is not None else None,
        )

    def runs_version(
        self,
        *,
        project: str | None = None,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        projects: Sequence[str] | None = None,
    ) -> str:
        """A fingerprint of the runs list for these filters: unchanged, nothing to fetch."""
        filters = RunFilter(project, projects, _label_filter(label), tag, text)
        with self._db.read() as conn:
            return run_pages.version(conn, filters=filters)

    def live_runs(self) -> list[tuple[str, str, int | None, float | None]]:
        """(project, run id, last step, latest vllm-kl) of the runs that are live now."""
        with self._db.read() as conn:
            rows = run_pages.live(conn, since=time.time() - self._live_window_s)
        return [(r.project, r.id, r.last_step, r.k3) for r in rows]

    def list_runs(
        self,
        *,
        project: str | None = None,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        limit: int = 500,
        projects: Sequence[str] | None = None,
    ) -> list[RunSummaryOut]:
        """The most recently active runs (the first page, for pickers and exports)."""
        return self.runs_page(
            project=project, label=label, tag=tag, text=text, limit=limit, projects=projects
        ).data

    def trends(
        self,
        run_ids: Sequence[str],
        *,
        metric: str = HEADLINE,
        points: int = 30,
        projects: Sequence[str] | None = None,
    ) -> dict[str, list[float]]:
        """Each run's metric in about `points` buckets, for a table's trend column (one query
        for the page; runs outside `projects` or unknown are left out)."""
        with self._db.read() as conn:
            found_runs = runs.configs(conn, run_ids)
            pks = {r.pk: r.id for r in found_runs if projects is None or r.project in projects}
            found = trends.trends(conn, list(pks), metric, points)
        return {pks[pk]: values for pk, values in found.items()}

    def get_run(self, run_id: str, *, projects: Sequence[str] | None = None) -> RunDetailOut:
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects, with_config=True)
            (summary,) = self._summaries(conn, [row])
            actor_rows = runs.actors(conn, row.pk)
            annotations = notes.rows(conn, row.pk)
        return RunDetailOut(
            **summary.model_dump(),
            config=runs.loads(row.config, {}),
            actors=[ActorOut.model_validate(a._mapping) for a in actor_rows],
            annotations=[
                AnnotationOut.model_validate({**n._mapping, "run_id": row.id}) for n in annotations
            ],
        )

    def run_configs(
        self, run_ids: Sequence[str], *, projects: Sequence[str] | None = None
    ) -> list[RunConfigOut]:
        """Names and configs of the given runs in one query, in the order asked; unknown runs
        (or runs outside `projects`) are left out."""
        with self._db.read() as conn:
            rows = {r.id: r for r in runs.configs(conn, run_ids)}
        return [
            RunConfigOut(id=r.id, name=r.name, config=runs.loads(r.config, {}))
            for run_id in run_ids
            if (r := rows.get(run_id)) is not None and (projects is None or r.project in projects)
        ]

    def list_metrics(
        self, run_id: str, *, projects: Sequence[str] | None = None
    ) -> list[MetricOut]:
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            rows = series.metric_rows(conn, row.pk)
        merged: dict[tuple[str, str], MetricOut] = {}
        for r in rows:
            out = merged.setdefault(
                (r.metric, r.source), MetricOut(name=r.metric, source=r.source, actors=[], points=0)
            )
            out.actors.append(r.actor)
            out.points += int(r.points)
        return list(merged.values())

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
        projects: Sequence[str] | None = None,
    ) -> SeriesOut:
        check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            source, sids = series.series_ids(conn, row.pk, metric, source, actor)
            result = series.EMPTY
            if sids:
                result = series.blocks(
                    conn,
                    self._db.dialect,
                    run_pk=row.pk,
                    source=source,
                    sids=sids,
                    step_min=step_min,
                    step_max=step_max,
                    max_points=max_points,
                )
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

    def series_many(
        self,
        run_ids: Sequence[str],
        metric: str,
        *,
        source: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 1000,
        projects: Sequence[str] | None = None,
    ) -> list[SeriesOut]:
        if not run_ids:
            raise Rejected("give at least one run id in `runs`")
        if len(run_ids) > MAX_OVERLAY:
            raise Rejected(f"at most {MAX_OVERLAY} runs can be overlaid at once")
        return [
            self.series(
                run_id,
                metric,
                source=source,
                step_min=step_min,
                step_max=step_max,
                max_points=max_points,
                projects=projects,
            )
            for run_id in run_ids
        ]

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

    def hardware(
        self,
        *,
        metric: str = "k3_kl",
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
        projects: Sequence[str] | None = None,
    ) -> list[HardwareOut]:
        with self._db.read() as conn:
            if run_ids:
                pks = [self._run(conn, run_id, projects).pk for run_id in run_ids]
            else:
                rows = runs.rows(conn, project=project, projects=projects, limit=10_000)
                pks = [r.pk for r in rows]
            out = aggregates.hardware_rows(conn, self._db.dialect, metric=metric, run_pks=pks)
        return [HardwareOut.model_validate(row) for row in out]

    # -- helpers ----------------------------------------------------------------------------
    def _run(
        self,
        conn: Connection,
        run_id: str,
        projects: Sequence[str] | None,
        *,
        with_config: bool = False,
    ) -> Any:
        row = runs.row(conn, run_id, with_config=with_config)
        if row is None or (projects is not None and row.project not in projects):
            raise NotFound(f"no run {run_id!r}; list runs with GET /api/v1/runs")
        return row

    def _summaries(self, conn: Connection, rows: Sequence[Any]) -> list[RunSummaryOut]:
        """Run summaries from run rows and heads: no value is read."""
        pks = [r.pk for r in rows]
        gpus = runs.gpus(conn, pks)
        latest = series.latest_values(conn, pks, LATEST)
        firing = run_pages.firing_counts(conn, [(r.project, r.id) for r in rows])
        now = time.time()
        return [
            RunSummaryOut(
                id=row.id,
                name=row.name,
                project=row.project,
                tags=runs.loads(row.tags, []),
                labels=runs.loads(row.labels, {}),
                status=self._status(row, now),
                created_at=row.created_at,
                last_seen=row.last_seen,
                last_step=row.last_step,
                gpus=gpus.get(row.pk, []),
                latest=latest.get(row.pk, {}),
                firing_alerts=firing.get((row.project, row.id), 0),
                raw_dropped=row.raw_dropped_at is not None,
            )
            for row in rows
        ]

    def _status(self, row: Any, now: float) -> RunStatus:
        if row.status in ("finished", "failed"):
            return row.status  # type: ignore[no-any-return]
        recent = row.last_seen is not None and now - row.last_seen <= self._live_window_s
        return "live" if recent and row.last_step is not None else "idle"


def check_range(step_min: int | None, step_max: int | None, max_points: int) -> None:
    if step_min is not None and step_max is not None and step_min > step_max:
        raise Rejected(f"step_min ({step_min}) is greater than step_max ({step_max})")
    if not 1 <= max_points <= MAX_POINTS_LIMIT:
        raise Rejected(f"max_points must be between 1 and {MAX_POINTS_LIMIT}")


def _label_filter(text: str | None) -> LabelFilter | None:
    try:
        return parse_optional(text)
    except InvalidLabelFilter as exc:
        raise Rejected(str(exc)) from exc
