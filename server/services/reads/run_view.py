"""The run page's read service: one call per redraw, returning everything the page draws.

A redraw (a zoom, a live tick that found a new step, a control changed) reads, on one
connection, the run's row (its last step first: a step landing meanwhile is drawn by the next
tick), the metrics it logs, the series of the panels those call for, and its annotations and
GPU segments; then its alert markers from the alarm feature, when the server runs one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from server.domain.alarms import Alert
from server.domain.reads.run_view import RunView, panels_for
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.reads.lookup import find
from server.services.reads.runs import annotations_of, metrics_of, segments_of
from server.services.reads.series import MAX_GRID, check_range, read_grid
from server.storage.db import Database
from server.storage.reading import runs

log = logging.getLogger("mismatch_monitor.reads")

Markers = Callable[[str, Sequence[str]], Sequence[Alert]]
"""The alerts a run page marks: (run id, its project) → the run's alerts (the alarm feature's
`markers`)."""


class RunViewReads:
    def __init__(self, db: Database, *, markers: Markers | None = None) -> None:
        self._db = db
        self._markers = markers

    def run_view(
        self,
        scope: ReadScope,
        run_id: str,
        *,
        extra: Sequence[str] = (),
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = 600,
    ) -> RunView:
        """What one redraw of the run page draws, over [step_min, step_max] (all of the run
        when None) in at most `max_points` buckets per panel; `extra` names metrics the reader
        added to the page's panels."""
        check_range(step_min, step_max, max_points)
        with self._db.read() as conn:
            row = find(conn, run_id, scope.projects)
            metrics = sorted({m.name for m in metrics_of(conn, row.pk)})
            panels = panels_for(metrics, extra)
            wanted = list(dict.fromkeys(m for panel in panels for m in panel.metrics))
            if len(wanted) > MAX_GRID:
                raise Rejected(f"at most {MAX_GRID} metrics on a run page")
            found = (
                read_grid(conn, [row], wanted, None, step_min, step_max, max_points)
                if wanted
                else []
            )
            annotations = annotations_of(conn, row)
            segments = segments_of(runs.segments(conn, row.pk))
        return RunView(
            run_id=row.id,
            last_step=row.last_step,
            metrics=tuple(metrics),
            panels=tuple(panels),
            series={s.metric: s for s in found if s.source is not None},
            annotations=annotations,
            gpu_segments=segments,
            alerts=self._alerts(row.id, row.project),
        )

    def _alerts(self, run_id: str, project: str) -> tuple[Alert, ...]:
        """The run's alerts to mark; none where the server runs without alarms, or where they
        cannot be read (the page still draws its series, and the log says why)."""
        if self._markers is None:
            return ()
        try:
            return tuple(self._markers(run_id, [project]))
        except Exception:
            log.exception("could not read the alerts of run %s", run_id)
            return ()
