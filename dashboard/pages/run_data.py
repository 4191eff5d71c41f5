"""The run page's data, apart from its layout: which panels to draw, what to fetch for a zoom
or a live tick, and the CSV export. Plain functions over the query layer and dicts, so they are
tested without a browser."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Mapping
from typing import Any

from dashboard.query import AlertsLike, QueryLike, dump
from server.domain.metrics import LOG_SCALE, PANELS
from server.schemas.query import SeriesPointOut

log = logging.getLogger("mismatch_monitor.dashboard")

MAX_POINTS = 1000
ZOOM_POINTS = 2000
CSV_FIELDS = tuple(SeriesPointOut.model_fields)  # a step bucket, as the API returns it
Series = dict[str, list[dict[str, Any]]]


def groups_for(available: set[str], extra: list[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """The run page's panels: (name, metrics, log axis) for every canonical panel the run has
    data for, then one panel per extra metric asked for."""
    chosen = [
        (panel.name, tuple(m for m in panel.metrics if m in available), panel.log)
        for panel in PANELS
        if any(m in available for m in panel.metrics)
    ]
    known = {m for panel in PANELS for m in panel.metrics}
    chosen += [(m, (m,), m in LOG_SCALE) for m in extra if m in available and m not in known]
    return chosen


def fetch(
    query: QueryLike,
    run_id: str,
    metrics: list[str],
    step_min: int | None,
    step_max: int | None,
    max_points: int,
) -> Series:
    """Each metric's step buckets, in one read; a run that cannot be read is drawn empty (and
    logged)."""
    try:
        found = query.run_series(
            run_id, metrics, step_min=step_min, step_max=step_max, max_points=max_points
        )
    except Exception:
        log.exception("could not read the series of run %s", run_id)
        return {m: [] for m in metrics}
    return {m: dump(found[m].points) if m in found else [] for m in metrics}


def append_new(query: QueryLike, run_id: str, wanted: list[str], held: Series) -> Series | None:
    """A live tick: the steps after the last one held, added to what is held; None when the run
    has no new step (then nothing else is read)."""
    ends = [points[-1]["step_end"] for points in held.values() if points]
    held_until = min(ends) if ends else -1
    last = query.last_step(run_id)
    if last is None or last <= held_until:
        return None
    new = fetch(query, run_id, wanted, held_until + 1, None, MAX_POINTS)
    data = dict(held)
    for metric, points in new.items():
        mine = data.get(metric) or []
        after = mine[-1]["step_end"] if mine else -1
        data[metric] = mine + [p for p in points if p["step"] > after]
    return data


def zoom_range(relayout: Mapping[str, Any]) -> tuple[int | None, int | None, int] | None:
    """(step_min, step_max, max_points) for a panel's zoom or reset; None for any other
    relayout (a legend click, a pan of the y axis)."""
    if "xaxis.range[0]" in relayout:
        step_min = max(0, int(float(relayout["xaxis.range[0]"])))
        step_max = int(float(relayout["xaxis.range[1]"])) + 1
        return step_min, step_max, ZOOM_POINTS
    if relayout.get("xaxis.autorange"):
        return None, None, MAX_POINTS
    return None


def series_csv(data: Series) -> str:
    """Every drawn metric's step buckets as CSV, at full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["metric", *CSV_FIELDS])
    for metric, points in sorted(data.items()):
        for p in points:
            writer.writerow([metric, *(p.get(f) for f in CSV_FIELDS)])
    return buffer.getvalue()


def alert_marks(alerts: AlertsLike | None, run_id: str) -> list[dict[str, Any]]:
    if alerts is None:
        return []
    try:
        found = alerts.markers(run_id)
    except Exception:
        log.exception("could not read the alerts of run %s", run_id)
        return []
    return [{"step": a.step, "rule": a.rule_name, "state": a.state} for a in found]


def annotation_rows(query: QueryLike, run_id: str) -> list[dict[str, Any]]:
    try:
        return [dump(a) for a in query.get_run(run_id).annotations]
    except Exception:
        log.exception("could not read the annotations of run %s", run_id)
        return []
