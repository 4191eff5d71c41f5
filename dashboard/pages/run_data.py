"""The run page's data, apart from its layout: which panels to draw, what to fetch for a zoom
or a live tick, and the CSV export. Plain functions over the query layer and dicts, so they are
tested without a browser."""

from __future__ import annotations

import csv
import io
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dashboard.query import AlertsLike, QueryLike, dump
from server.domain import signals
from server.domain.metrics import Panel, run_panels
from server.schemas.query import SeriesPointOut

log = logging.getLogger("mismatch_monitor.dashboard")

MAX_POINTS = 600  # a half-width panel is about 600 px wide: a bucket per pixel
ZOOM_POINTS = 2000
CSV_FIELDS = tuple(SeriesPointOut.model_fields)  # a step bucket, as the API returns it
Series = dict[str, list[dict[str, Any]]]


def groups_for(available: set[str], extra: list[str]) -> list[Panel]:
    """The run page's panels: the run's mismatch signals first, then every canonical panel it
    has data for (`run_panels`), then one panel per extra metric asked for (a mismatch signal
    titled with its name and meaning)."""
    chosen = run_panels(available)
    known = {m for panel in chosen for m in panel.metrics}
    for m in extra:
        if m in available and m not in known:
            signal = signals.BY_METRIC.get(m)
            chosen.append(
                Panel(m, (m,)) if signal is None else Panel(m, (m,), signal.label, signal.meaning)
            )
            known.add(m)
    return chosen


@dataclass(frozen=True)
class View:
    """What the run page shows: the run, a step range (None: all of it), how many buckets, and
    the last step drawn (the cursor a live tick compares against)."""

    run: str
    step_min: int | None = None
    step_max: int | None = None
    max_points: int = MAX_POINTS
    drawn: int | None = None
    project: str | None = None  # given when projects the reader sees share the run's id

    @property
    def scope(self) -> list[str] | None:
        """The projects to look for the run in (None: the reader's)."""
        return [self.project] if self.project else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> View:
        return cls(
            str(data["run"]),
            data.get("step_min"),
            data.get("step_max"),
            int(data.get("max_points") or MAX_POINTS),
            data.get("drawn"),
            data.get("project"),
        )


def fetch(query: QueryLike, view: View, metrics: list[str]) -> Series:
    """Each metric's step buckets, in one read; a run that cannot be read is drawn empty (and
    logged)."""
    try:
        found = query.run_series(
            view.run,
            metrics,
            step_min=view.step_min,
            step_max=view.step_max,
            max_points=view.max_points,
            projects=view.scope,
        )
    except Exception:
        log.exception("could not read the series of run %s", view.run)
        return {m: [] for m in metrics}
    return {m: dump(found[m].points) if m in found else [] for m in metrics}


def zoom_of(view: View) -> dict[str, Any]:
    """The zoom store of a view opened from a link: its range, at zoom resolution if any."""
    zoomed = view.step_min is not None or view.step_max is not None
    return {
        "step_min": view.step_min,
        "step_max": view.step_max,
        "max_points": ZOOM_POINTS if zoomed else MAX_POINTS,
    }


def series_csv(data: Series) -> str:
    """Every drawn metric's step buckets as CSV, at full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["metric", *CSV_FIELDS])
    for metric, points in sorted(data.items()):
        for p in points:
            writer.writerow([metric, *(p.get(f) for f in CSV_FIELDS)])
    return buffer.getvalue()


def alert_marks(
    alerts: AlertsLike | None, run_id: str, scope: list[str] | None = None
) -> list[dict[str, Any]]:
    if alerts is None:
        return []
    try:
        found = alerts.markers(run_id, projects=scope)
    except Exception:
        log.exception("could not read the alerts of run %s", run_id)
        return []
    return [{"step": a.step, "rule": a.rule_name, "state": a.state} for a in found]


def switched_segments(segments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU segments worth drawing: those of the first source (by name) whose GPU type
    changed during the run; none when every source kept one GPU type."""
    for source in sorted({s["source"] for s in segments}):
        mine = [s for s in segments if s["source"] == source]
        if len(mine) > 1:
            return mine
    return []


def gpu_switch_notes(segments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One annotation per change of GPU type: "GPU: A → B at step s"."""
    return [
        {
            "step": after["first_step"],
            "kind": "gpu_change",
            "text": f"GPU: {before['gpu']} → {after['gpu']} at step {after['first_step']}",
        }
        for before, after in itertools.pairwise(segments)
    ]


def annotation_rows(
    query: QueryLike, run_id: str, scope: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's annotations (its GPU changes among them) and the GPU segments to shade."""
    try:
        detail = query.get_run(run_id, projects=scope)
    except Exception:
        log.exception("could not read the annotations of run %s", run_id)
        return [], []
    segments = switched_segments(dump(detail.gpu_segments))
    return [dump(a) for a in detail.annotations] + gpu_switch_notes(segments), segments
