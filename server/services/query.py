"""The query layer: the one way the API routes and the dashboard read stored data.

Returns the `…Out` models of `server/schemas/query.py`. Access control (which projects a caller
may read) is passed in as `projects`; None means every project.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

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
    RunStatus,
    RunSummaryOut,
    SeriesOut,
)
from server.services.canonical import LATEST_METRICS
from server.storage import reads
from server.storage.db import Database

GroupBy = Literal["none", "gpu", "actor", "run"]
MAX_POINTS_LIMIT = 100_000


class QueryService:
    def __init__(self, db: Database, *, live_window_s: float = 120.0) -> None:
        self._db = db
        self._live_window_s = live_window_s

    # -- runs -------------------------------------------------------------------------------
    def projects(self, *, projects: Sequence[str] | None = None) -> list[str]:
        with self._db.read() as conn:
            names = reads.projects(conn)
        return [n for n in names if projects is None or n in projects]

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
        label_key, label_value = _parse_label(label)
        with self._db.read() as conn:
            # Label and tag filters run in Python over the JSON columns: few runs, portable SQL.
            fetch = limit if label is None and tag is None else max(limit, 5000)
            rows = reads.run_rows(conn, project=project, projects=projects, text=text, limit=fetch)
            rows = [r for r in rows if _matches(r, label_key, label_value, tag)][:limit]
            gpus = reads.run_gpus(conn, [r.pk for r in rows])
            latest = reads.latest_values(conn, self._db.dialect, rows, LATEST_METRICS)
        now = time.time()
        return [self._summary(r, gpus.get(r.pk, []), latest.get(r.pk, {}), now) for r in rows]

    def get_run(self, run_id: str, *, projects: Sequence[str] | None = None) -> RunDetailOut:
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            gpus = reads.run_gpus(conn, [row.pk])
            latest = reads.latest_values(conn, self._db.dialect, [row], LATEST_METRICS)
            actor_rows = reads.actors(conn, row.pk)
            notes = reads.annotation_rows(conn, row.pk)
        summary = self._summary(row, gpus.get(row.pk, []), latest.get(row.pk, {}), time.time())
        return RunDetailOut(
            **summary.model_dump(),
            config=reads.loads(row.config, {}),
            actors=[
                ActorOut(
                    source=a.source,
                    actor=a.actor,
                    gpu=a.gpu,
                    first_step=a.first_step,
                    last_step=a.last_step,
                    steps=a.steps,
                )
                for a in actor_rows
            ],
            annotations=[
                AnnotationOut(
                    id=n.id,
                    run_id=row.id,
                    step=n.step,
                    time=n.time,
                    kind=n.kind,
                    source=n.source,
                    actor=n.actor,
                    text=n.text,
                )
                for n in notes
            ],
        )

    def run_configs(
        self, run_ids: Sequence[str], *, projects: Sequence[str] | None = None
    ) -> list[RunConfigOut]:
        """Names and configs of the given runs in one query, in the order asked; unknown runs
        (or runs outside `projects`) are left out."""
        with self._db.read() as conn:
            rows = {r.id: r for r in reads.run_rows_by_id(conn, run_ids)}
        return [
            RunConfigOut(id=r.id, name=r.name, config=reads.loads(r.config, {}))
            for run_id in run_ids
            if (r := rows.get(run_id)) is not None and (projects is None or r.project in projects)
        ]

    def list_metrics(
        self, run_id: str, *, projects: Sequence[str] | None = None
    ) -> list[MetricOut]:
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            rows = reads.metric_rows(conn, row.pk)
        merged: dict[tuple[str, str], MetricOut] = {}
        for metric, source, actor, n in rows:
            out = merged.setdefault(
                (metric, source), MetricOut(name=metric, source=source, actors=[], points=0)
            )
            out.actors.append(actor)
            out.points += int(n)
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
        _check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            source, sids = reads.series_ids(conn, row.pk, metric, source, actor)
            if not sids:
                result = reads.SeriesResult(0, 1, [], {})
            else:
                result = reads.series_buckets(
                    conn,
                    self._db.dialect,
                    run_pk=row.pk,
                    source=source,
                    sids=sids,
                    step_min=step_min,
                    step_max=step_max,
                    max_points=max_points,
                )
        times = result.times
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
                "points": [
                    {
                        "step": b.step,
                        "step_end": b.step_end,
                        "time": times.get(b.step_end),
                        "min": b.min,
                        "max": b.max,
                        "mean": b.mean,
                        "last": b.last,
                        "count": b.count,
                        "nan": b.nan,
                        "pos_inf": b.pos_inf,
                        "neg_inf": b.neg_inf,
                    }
                    for b in result.buckets
                ],
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
        if len(run_ids) > 50:
            raise Rejected("at most 50 runs can be overlaid at once")
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
        _check_range(step_min, step_max, 1)
        with self._db.read() as conn:
            pks = [self._run(conn, run_id, projects).pk for run_id in run_ids]
            rows = reads.bucket_totals(
                conn,
                run_pks=pks,
                step_min=step_min,
                step_max=step_max,
                group_by=group_by,
                basis=basis,
            )
        return [
            BucketRowOut(
                group=str(r[0]),
                basis=basis,
                lo=r[2],
                hi=r[3],
                tokens=r[4],
                sum_d=r[5],
                sum_abs_d=r[6],
                sum_k3=r[7],
                sum_reverse_k3=r[8],
                oob=r[9],
                steps=r[10],
                actors=r[11],
            )
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
        _check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            rows = reads.bucket_blocks(
                conn,
                self._db.dialect,
                run_pk=row.pk,
                step_min=step_min,
                step_max=step_max,
                basis=basis,
                max_points=max_points,
            )
        return [
            BucketStepOut(
                step=r[0],
                step_end=r[1],
                lo=r[3],
                hi=r[4],
                tokens=r[5],
                sum_abs_d=r[6],
                sum_k3=r[7],
                oob=r[8],
            )
            for r in rows
        ]

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
                rows = reads.run_rows(conn, project=project, projects=projects, limit=10_000)
                pks = [r.pk for r in rows]
            out = reads.hardware_rows(conn, self._db.dialect, metric=metric, run_pks=pks)
        return [HardwareOut(**row) for row in out]

    # -- helpers ----------------------------------------------------------------------------
    def _run(self, conn: Any, run_id: str, projects: Sequence[str] | None) -> Any:
        row = reads.run_row(conn, run_id)
        if row is None or (projects is not None and row.project not in projects):
            raise NotFound(f"no run {run_id!r}; list runs with GET /api/v1/runs")
        return row

    def _summary(
        self, row: Any, gpus: list[str], latest: dict[str, tuple[str, float]], now: float
    ) -> RunSummaryOut:
        return RunSummaryOut(
            id=row.id,
            name=row.name,
            project=row.project,
            tags=reads.loads(row.tags, []),
            labels=reads.loads(row.labels, {}),
            status=self._status(row, now),
            created_at=row.created_at,
            last_seen=row.last_seen,
            last_step=row.last_step,
            gpus=gpus,
            latest={name: value for name, (_, value) in latest.items()},
        )

    def _status(self, row: Any, now: float) -> RunStatus:
        if row.status == "finished":
            return "finished"
        if row.status == "failed":
            return "failed"
        recent = row.last_seen is not None and now - row.last_seen <= self._live_window_s
        if recent and row.last_step is not None:
            return "live"
        return "idle"


def _parse_label(label: str | None) -> tuple[str | None, str | None]:
    if label is None:
        return None, None
    key, sep, value = label.partition("=")
    if not key:
        raise Rejected("label filter must be KEY or KEY=VALUE")
    return key, (value if sep else None)


def _matches(row: Any, key: str | None, value: str | None, tag: str | None) -> bool:
    if key is not None:
        labels = reads.loads(row.labels, {})
        if key not in labels or (value is not None and labels[key] != value):
            return False
    return not (tag is not None and tag not in reads.loads(row.tags, []))


def _check_range(step_min: int | None, step_max: int | None, max_points: int) -> None:
    if step_min is not None and step_max is not None and step_min > step_max:
        raise Rejected(f"step_min ({step_min}) is greater than step_max ({step_max})")
    if not 1 <= max_points <= MAX_POINTS_LIMIT:
        raise Rejected(f"max_points must be between 1 and {MAX_POINTS_LIMIT}")
