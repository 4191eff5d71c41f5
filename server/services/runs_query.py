"""The query layer's runs: the runs list (paged, sorted, filtered), run summaries and details,
trends, configs, metrics. Summaries come from run rows and heads: no value is read.

`QueryService` (`query.py`) adds the series, bucket and hardware reads to these; access control
(which projects a caller may read) is passed in as `projects`, None meaning every project.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from server.analysis.hardware import gpu_segments
from server.domain import signals
from server.domain.labels import InvalidLabelFilter, LabelFilter, parse_optional
from server.domain.metrics import LATEST
from server.domain.names import ExemplarKind, RunKind, RunStatus
from server.errors import Conflict, NotFound, Rejected
from server.schemas.query import (
    ActorOut,
    AnnotationOut,
    ExemplarOut,
    GpuSegmentOut,
    MetricOut,
    RunConfigOut,
    RunDetailOut,
    RunPageOut,
    RunSummaryOut,
    SignalOut,
)
from server.storage import exemplars, heads, notes, run_pages, runs, series, trends
from server.storage.db import Database
from server.storage.run_pages import Cursor, RunFilter, Sort


class RunQueries:
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
        kind: RunKind | None = None,
        projects: Sequence[str] | None = None,
    ) -> RunPageOut:
        """One page of runs, filtered and sorted in the database; `cursor` continues a paging."""
        filters = RunFilter(project, projects, _label_filter(label), tag, text, kind)
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

    def live_runs(self) -> list[tuple[str, str, int | None, str | None, float | None]]:
        """(project, run id, last step, headline signal's metric, its latest value) of the runs
        that are live now (the metric and value None where a run logs no mismatch signal)."""
        with self._db.read() as conn:
            rows = run_pages.live(conn, since=time.time() - self._live_window_s)
        return [(r.project, r.id, r.last_step, r.metric, r.value) for r in rows]

    def list_runs(
        self,
        *,
        project: str | None = None,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        limit: int = 500,
        kind: RunKind | None = None,
        projects: Sequence[str] | None = None,
    ) -> list[RunSummaryOut]:
        """The most recently active runs (the first page, for pickers and exports)."""
        return self.runs_page(
            project=project,
            label=label,
            tag=tag,
            text=text,
            limit=limit,
            kind=kind,
            projects=projects,
        ).data

    def trends(
        self,
        run_ids: Sequence[str],
        *,
        metric: str | None = None,
        points: int = 30,
        projects: Sequence[str] | None = None,
    ) -> dict[str, list[float]]:
        """Each run's metric in about `points` buckets, for a table's trend column (one query
        for the page; runs outside `projects`, unknown, or whose id several of `projects` use
        are left out: narrow `projects` to one to see those). Without a `metric`, each run's
        headline signal (the one its mismatch cell shows), chosen from its heads."""
        with self._db.read() as conn:
            found_runs = runs.rows_by_id(conn, run_ids, projects)
            pks = {rows[0].pk: run_id for run_id, rows in found_runs.items() if len(rows) == 1}
            if metric is None:
                wanted = {pk: m for pk, (m, _) in heads.headlines(conn, list(pks)).items()}
            else:
                wanted = dict.fromkeys(pks, metric)
            found = trends.trends_of(conn, wanted, points)
        return {pks[pk]: values for pk, values in found.items()}

    def get_run(self, run_id: str, *, projects: Sequence[str] | None = None) -> RunDetailOut:
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects, with_config=True)
            (summary,) = self._summaries(conn, [row])
            actor_rows = runs.actors(conn, row.pk)
            spans = runs.segments(conn, row.pk)
            annotations = notes.rows(conn, row.pk)
        return RunDetailOut(
            **summary.model_dump(),
            config=runs.loads(row.config, {}),
            actors=[ActorOut.model_validate(a._mapping) for a in actor_rows],
            annotations=[
                AnnotationOut.model_validate({**n._mapping, "run_id": row.id}) for n in annotations
            ],
            gpu_segments=_segments(spans),
        )

    def run_configs(
        self, run_ids: Sequence[str], *, projects: Sequence[str] | None = None
    ) -> list[RunConfigOut]:
        """Names and configs of the given runs in one query, in the order asked; unknown runs
        (or runs outside `projects`, or ids several of them use) are left out."""
        with self._db.read() as conn:
            found = runs.rows_by_id(conn, run_ids, projects)
            pks = [rows[0].pk for rows in found.values() if len(rows) == 1]
            rows = {r.id: r for r in runs.configs(conn, pks)}
        return [
            RunConfigOut(id=r.id, name=r.name, config=runs.loads(r.config, {}))
            for run_id in run_ids
            if (r := rows.get(run_id)) is not None
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

    def exemplars(
        self,
        run_id: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        kind: ExemplarKind | None = None,
        limit: int = 1000,
        projects: Sequence[str] | None = None,
    ) -> list[ExemplarOut]:
        """The run's token exemplars over a step range, largest |d| first (non-finite first)."""
        if step_min is not None and step_max is not None and step_min > step_max:
            raise Rejected(f"step_min ({step_min}) is after step_max ({step_max})")
        wanted = exemplars.ExemplarFilter(step_min, step_max, kind, limit)
        with self._db.read() as conn:
            row = self._run(conn, run_id, projects)
            found = exemplars.read(conn, row.pk, wanted)
        return [ExemplarOut.model_validate(r._mapping) for r in found]

    def last_step(self, run_id: str, *, projects: Sequence[str] | None = None) -> int | None:
        """The run's last step: what a live view checks before it asks for anything else."""
        with self._db.read() as conn:
            return self._run(conn, run_id, projects).last_step  # type: ignore[no-any-return]

    # -- helpers ----------------------------------------------------------------------------
    def _run(
        self,
        conn: Connection,
        run_id: str,
        projects: Sequence[str] | None,
        *,
        with_config: bool = False,
    ) -> Any:
        return _one(run_id, runs.row(conn, run_id, projects, with_config=with_config))

    def _runs(
        self, conn: Connection, run_ids: Sequence[str], projects: Sequence[str] | None
    ) -> list[Any]:
        """`_run` for several runs in one query, in the order asked."""
        found = runs.rows_by_id(conn, run_ids, projects)
        return [_one(run_id, found.get(run_id, [])) for run_id in run_ids]

    def _summaries(self, conn: Connection, rows: Sequence[Any]) -> list[RunSummaryOut]:
        """Run summaries from run rows and heads: no value is read."""
        pks = [r.pk for r in rows]
        gpus = runs.gpus(conn, pks)
        latest = series.latest_values(conn, pks, LATEST)
        headlines = heads.headlines(conn, pks)
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
                headline=_headline(headlines.get(row.pk)),
                firing_alerts=firing.get((row.project, row.id), 0),
                raw_dropped=row.raw_dropped_at is not None,
                kind=row.kind,
            )
            for row in rows
        ]

    def _status(self, row: Any, now: float) -> RunStatus:
        if row.status in ("finished", "failed"):
            return row.status  # type: ignore[no-any-return]
        recent = row.last_seen is not None and now - row.last_seen <= self._live_window_s
        return "live" if recent and row.last_step is not None else "idle"


def _headline(found: tuple[str, float] | None) -> SignalOut | None:
    """A run's headline (metric, value) in words: its signal's label and meaning."""
    if found is None:
        return None
    metric, value = found
    signal = signals.BY_METRIC[metric]
    return SignalOut(metric=metric, label=signal.label, meaning=signal.meaning, value=value)


def _one(run_id: str, rows: Sequence[Any]) -> Any:
    """The one run a request means. Rows come from the caller's projects only, so a run of
    another project is as unknown as a missing one, and naming the projects that share an id
    tells the caller nothing it could not list."""
    if not rows:
        raise NotFound(f"no run {run_id!r}; list runs with GET /api/v1/runs")
    if len(rows) > 1:
        projects = [r.project for r in rows]
        raise Conflict(
            f"run id {run_id!r} is used in projects {', '.join(projects)}; "
            "add project=<name> to choose",
            detail={"projects": projects},
        )
    return rows[0]


def _segments(spans: Sequence[Any]) -> list[GpuSegmentOut]:
    """A run's GPU segments per source, from its actors' stored segments: each actor segment's
    first and last step stand for it (`gpu_segments` merges them, a step whose actors name
    different GPUs is a mixed fleet)."""
    out = []
    for source in sorted({s.source for s in spans}):
        ends = [
            (step, s.gpu)
            for s in spans
            if s.source == source
            for step in (s.first_step, s.last_step)
        ]
        out += [
            GpuSegmentOut(source=source, gpu=g.gpu, first_step=g.first_step, last_step=g.last_step)
            for g in gpu_segments(ends)
        ]
    return out


def _label_filter(text: str | None) -> LabelFilter | None:
    try:
        return parse_optional(text)
    except InvalidLabelFilter as exc:
        raise Rejected(str(exc)) from exc
