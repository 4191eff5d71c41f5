"""The runs read service: the runs list (paged, sorted, filtered), run summaries and details,
trends, configs, metrics, exemplars. Summaries come from run rows and heads: no value is read.

Every read takes the reader's `ReadScope` first and returns read-models
(`server.domain.reads.runs`); a run outside the scope is as unknown as a missing one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from server.analysis.hardware import gpu_segments
from server.domain import signals
from server.domain.metrics import LATEST
from server.domain.names import ENDED, ExemplarKind, RunKind, RunStatus
from server.domain.reads.runs import (
    Actor,
    Annotation,
    Exemplar,
    GpuSegment,
    Headline,
    MetricInfo,
    RunConfig,
    RunDetail,
    RunPage,
    RunSummary,
)
from server.domain.reads.scope import ReadScope
from server.domain.run_filters import RunConditions
from server.errors import Rejected
from server.services.reads.lookup import find, find_all, label_filter
from server.storage.db import Database
from server.storage.reading import run_pages, runs, series, trends
from server.storage.reading.run_pages import Cursor, RunFilter, Sort
from server.storage.writing import exemplars, heads, notes

_label_filter = label_filter  # the hardware reads (`hardware`) filter with it too


class RunReads:
    def __init__(self, db: Database, *, live_window_s: float = 120.0) -> None:
        self._db = db
        self._live_window_s = live_window_s

    def projects(self, scope: ReadScope) -> list[str]:
        with self._db.read() as conn:
            names = runs.projects(conn)
        return [n for n in names if scope.projects is None or n in scope.projects]

    def runs_page(
        self,
        scope: ReadScope,
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
        conditions: RunConditions | None = None,
    ) -> RunPage:
        """One page of runs, filtered and sorted in the database; `cursor` continues a paging.
        `conditions` (status, GPU type, config, last activity) judge a run's status at the
        moment its summary is made, so the two agree."""
        now = time.time()
        filters = RunFilter(
            project, scope.projects, label_filter(label), tag, text, kind,
            conditions or RunConditions(), now - self._live_window_s,
        )  # fmt: skip
        after = Cursor.decode(cursor) if cursor else None
        with self._db.read() as conn:
            page = run_pages.page(
                conn, filters=filters, sort=sort, descending=descending, after=after, limit=limit
            )
            data = self._summaries(conn, page.rows, now)
        next_cursor = page.next.encode() if page.next is not None else None
        return RunPage(tuple(data), page.total, next_cursor)

    def runs_version(
        self,
        scope: ReadScope,
        *,
        project: str | None = None,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
    ) -> str:
        """A fingerprint of the runs list for these filters: unchanged, nothing to fetch."""
        filters = RunFilter(project, scope.projects, label_filter(label), tag, text)
        with self._db.read() as conn:
            return run_pages.version(conn, filters=filters)

    def live_runs(self) -> list[tuple[str, str, int | None, str | None, float | None]]:
        """(project, run id, last step, headline signal's metric, its latest value) of the runs
        that are live now, in every project (the metric and value None where a run logs no
        mismatch signal): what the server's own gauges export."""
        with self._db.read() as conn:
            rows = run_pages.live(conn, since=time.time() - self._live_window_s)
        return [(r.project, r.id, r.last_step, r.metric, r.value) for r in rows]

    def list_runs(
        self,
        scope: ReadScope,
        *,
        project: str | None = None,
        label: str | None = None,
        text: str | None = None,
        limit: int = 500,
        kind: RunKind | None = None,
    ) -> list[RunSummary]:
        """The most recently active runs (the first page, for pickers and exports)."""
        page = self.runs_page(
            scope, project=project, label=label, text=text, limit=limit, kind=kind
        )
        return list(page.runs)

    def trends(
        self,
        scope: ReadScope,
        run_ids: Sequence[str],
        *,
        metric: str | None = None,
        points: int = 30,
    ) -> dict[str, list[float]]:
        """Each run's metric in about `points` buckets, for a table's trend column (one query
        for the page; runs outside the scope, unknown, or whose id several projects in it use
        are left out: narrow the scope to one project to see those). Without a `metric`, each
        run's headline signal (the one its mismatch cell shows), chosen from its heads."""
        with self._db.read() as conn:
            found_runs = runs.rows_by_id(conn, run_ids, scope.projects)
            pks = {rows[0].pk: run_id for run_id, rows in found_runs.items() if len(rows) == 1}
            if metric is None:
                found_heads = heads.summary_heads(conn, list(pks), ()).headlines
                wanted = {pk: m for pk, (m, _) in found_heads.items()}
            else:
                wanted = dict.fromkeys(pks, metric)
            found = trends.trends_of(conn, wanted, points)
        return {pks[pk]: values for pk, values in found.items()}

    def get_run(self, scope: ReadScope, run_id: str) -> RunDetail:
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects, with_config=True)
            (summary,) = self._summaries(conn, [row], time.time())
            actor_rows = runs.actors(conn, row.pk)
            spans = runs.segments(conn, row.pk)
            annotations = annotations_of(conn, row)
        return RunDetail(
            **vars(summary),
            config=runs.loads(row.config, {}),
            actors=tuple(Actor(**a._mapping) for a in actor_rows),
            annotations=annotations,
            gpu_segments=segments_of(spans),
        )

    def run_configs(self, scope: ReadScope, run_ids: Sequence[str]) -> list[RunConfig]:
        """Names and configs of the given runs in one query, in the order asked; unknown runs
        (or runs outside the scope, or ids several projects in it use) are left out."""
        with self._db.read() as conn:
            found = runs.rows_by_id(conn, run_ids, scope.projects)
            pks = [rows[0].pk for rows in found.values() if len(rows) == 1]
            rows = {r.id: r for r in runs.configs(conn, pks)}
        return [
            RunConfig(r.id, r.name, runs.loads(r.config, {}))
            for run_id in run_ids
            if (r := rows.get(run_id)) is not None
        ]

    def list_metrics(self, scope: ReadScope, run_id: str) -> list[MetricInfo]:
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects)
            return metrics_of(conn, row.pk)

    def latest_of(self, scope: ReadScope, run_id: str, prefix: str) -> dict[str, float]:
        """The latest value of each metric of the run whose name starts with `prefix` (the
        figures a parity report keeps beside its headline ones), in one read of the heads."""
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects)
            names = sorted({m.name for m in metrics_of(conn, row.pk) if m.name.startswith(prefix)})
            if not names:
                return {}
            found = heads.summary_heads(conn, [row.pk], names).latest.get(row.pk, {})
        return {k: v for k, v in found.items() if k in names}

    def exemplars(
        self,
        scope: ReadScope,
        run_id: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        kind: ExemplarKind | None = None,
        limit: int = 1000,
    ) -> list[Exemplar]:
        """The run's token exemplars over a step range, largest |d| first (non-finite first)."""
        if step_min is not None and step_max is not None and step_min > step_max:
            raise Rejected(f"step_min ({step_min}) is after step_max ({step_max})")
        wanted = exemplars.ExemplarFilter(step_min, step_max, kind, limit)
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects)
            found = exemplars.read(conn, row.pk, wanted)
        return [Exemplar(*r) for r in found]

    def last_step(self, scope: ReadScope, run_id: str) -> int | None:
        """The run's last step: what a live view checks before it asks for anything else."""
        with self._db.read() as conn:
            return find(conn, run_id, scope.projects).last_step  # type: ignore[no-any-return]

    # -- helpers ----------------------------------------------------------------------------
    def _runs(
        self, conn: Connection, run_ids: Sequence[str], projects: Sequence[str] | None
    ) -> list[Any]:
        """The rows of the runs asked for, in the order asked (the hardware reads' lookup)."""
        return find_all(conn, run_ids, projects)

    def _summaries(self, conn: Connection, rows: Sequence[Any], now: float) -> list[RunSummary]:
        """Run summaries from run rows and heads, statuses as of `now`: no value is read."""
        pks = [r.pk for r in rows]
        gpus = runs.gpus(conn, pks)
        found = heads.summary_heads(conn, pks, LATEST)
        firing = run_pages.firing_counts(conn, [(r.project, r.id) for r in rows])
        return [
            RunSummary(
                id=row.id,
                name=row.name,
                project=row.project,
                tags=tuple(runs.loads(row.tags, [])),
                labels=runs.loads(row.labels, {}),
                status=self._status(row, now),
                created_at=row.created_at,
                last_seen=row.last_seen,
                last_step=row.last_step,
                gpus=tuple(gpus.get(row.pk, [])),
                latest=found.latest.get(row.pk, {}),
                headline=_headline(found.headlines.get(row.pk)),
                firing_alerts=firing.get((row.project, row.id), 0),
                raw_dropped=row.raw_dropped_at is not None,
                kind=row.kind,
                # a run's end is its last activity: the batch that said it ended
                ended_at=row.last_seen if row.status in ENDED else None,
            )
            for row in rows
        ]

    def _status(self, row: Any, now: float) -> RunStatus:
        if row.status in ENDED:
            return row.status  # type: ignore[no-any-return]
        recent = row.last_seen is not None and now - row.last_seen <= self._live_window_s
        return "live" if recent and row.last_step is not None else "idle"


def metrics_of(conn: Connection, run_pk: int) -> list[MetricInfo]:
    """The run's metrics per source, with their actors and how many points they logged."""
    merged: dict[tuple[str, str], tuple[list[str], int]] = {}
    for r in series.metric_rows(conn, run_pk):
        actors, points = merged.get((r.metric, r.source), ([], 0))
        merged[(r.metric, r.source)] = ([*actors, r.actor], points + int(r.points))
    return [
        MetricInfo(metric, source, tuple(actors), points)
        for (metric, source), (actors, points) in merged.items()
    ]


def annotations_of(conn: Connection, row: Any) -> tuple[Annotation, ...]:
    return tuple(Annotation(run_id=row.id, **n._mapping) for n in notes.rows(conn, row.pk))


def segments_of(spans: Sequence[Any]) -> tuple[GpuSegment, ...]:
    """A run's GPU segments per source, from its actors' stored segments: each actor segment's
    first and last step stand for it (`gpu_segments` merges them, a step whose actors name
    different GPUs is a mixed fleet)."""
    out: list[GpuSegment] = []
    for source in sorted({s.source for s in spans}):
        ends = [
            (step, s.gpu)
            for s in spans
            if s.source == source
            for step in (s.first_step, s.last_step)
        ]
        out += [GpuSegment(source, g.gpu, g.first_step, g.last_step) for g in gpu_segments(ends)]
    return tuple(out)


def _headline(found: tuple[str, float] | None) -> Headline | None:
    """A run's headline (metric, value) in words: its signal's label and meaning."""
    if found is None:
        return None
    metric, value = found
    signal = signals.BY_METRIC[metric]
    return Headline(metric, signal.label, signal.meaning, value)
