"""The run page's data, apart from its layout: the view the browser holds, the one read of a
redraw (`fetch`), the panels' points, notes and marks, and the CSV export. Plain functions over
the read port's `RunView`, so they are tested without a browser."""

from __future__ import annotations

import csv
import io
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from server.domain.reads.run_view import RunView
from server.domain.reads.runs import Annotation, GpuSegment
from server.domain.reads.scope import ReadScope
from server.figures.points import Mark, Note
from server.services.reads.port import Reads

log = logging.getLogger("mismatch_monitor.dashboard")

MAX_POINTS = 600  # a half-width panel is about 600 px wide: a bucket per pixel
ZOOM_POINTS = 2000
CSV_FIELDS = (  # a step bucket, as the API returns it
    *("step", "step_end", "time", "min", "max", "mean", "last"),
    *("count", "nan", "pos_inf", "neg_inf"),
)
ViewData = dict[str, str | int | None]
"""A `View` as the browser holds it (a `dcc.Store`)."""


@dataclass(frozen=True)
class View:
    """What the run page shows: the run, a step range (None: all of it), how many buckets."""

    run: str
    step_min: int | None = None
    step_max: int | None = None
    max_points: int = MAX_POINTS
    project: str | None = None  # given when projects the reader sees share the run's id

    def scope(self, reader: ReadScope) -> ReadScope:
        """Where to look for the run: the reader's projects, narrowed to the view's project."""
        return reader.narrowed(self.project)

    def as_dict(self) -> ViewData:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> View:
        return cls(
            str(data["run"]),
            _int(data.get("step_min")),
            _int(data.get("step_max")),
            _int(data.get("max_points")) or MAX_POINTS,
            str(data["project"]) if data.get("project") else None,
        )


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fetch(reads: Reads, reader: ReadScope, view: View, extra: Sequence[str]) -> RunView | None:
    """Everything a redraw of the view draws, in one read; None (and the log says why) when
    the run cannot be read."""
    try:
        return reads.run_views.run_view(
            view.scope(reader),
            view.run,
            extra=extra,
            step_min=view.step_min,
            step_max=view.step_max,
            max_points=view.max_points,
        )
    except Exception:
        log.exception("could not read run %s", view.run)
        return None


# A panel's zoom as {step_min, step_max, max_points}; its reset as the whole run; anything else
# (a resize, a legend click, a zoom of a wall-time axis) changes nothing.
ZOOM_JS = f"""
function(relayouts) {{
    const fired = dash_clientside.callback_context.triggered || [];
    for (const t of fired) {{
        const r = t.value || {{}};
        const lo = r["xaxis.range[0]"], hi = r["xaxis.range[1]"];
        if (typeof lo === "number" && typeof hi === "number") {{
            return {{step_min: Math.max(0, Math.floor(lo)), step_max: Math.floor(hi) + 1,
                     max_points: {ZOOM_POINTS}}};
        }}
        if (r["xaxis.autorange"]) {{
            return {{step_min: null, step_max: null, max_points: {MAX_POINTS}}};
        }}
    }}
    return dash_clientside.no_update;
}}
"""


def zoom_of(view: View) -> dict[str, int | None]:
    """The zoom store of a view opened from a link: its range, at zoom resolution if any."""
    zoomed = view.step_min is not None or view.step_max is not None
    return {
        "step_min": view.step_min,
        "step_max": view.step_max,
        "max_points": ZOOM_POINTS if zoomed else MAX_POINTS,
    }


def series_csv(found: RunView) -> str:
    """Every drawn metric's step buckets as CSV, at full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["metric", *CSV_FIELDS])
    for metric, series in sorted(found.series.items()):
        for p in series.points:
            writer.writerow([metric, *(getattr(p, f) for f in CSV_FIELDS)])
    return buffer.getvalue()


def alert_marks(found: RunView) -> list[Mark]:
    return [Mark(a.step, a.rule_name, a.state) for a in found.alerts]


def switched_segments(segments: Sequence[GpuSegment]) -> list[GpuSegment]:
    """The GPU segments worth drawing: those of the first source (by name) whose GPU type
    changed during the run; none when every source kept one GPU type."""
    for source in sorted({s.source for s in segments}):
        mine = [s for s in segments if s.source == source]
        if len(mine) > 1:
            return mine
    return []


def gpu_switch_notes(segments: Sequence[GpuSegment]) -> list[Note]:
    """One annotation per change of GPU type: "GPU: A → B at step s"."""
    return [
        Note(
            after.first_step,
            "gpu_change",
            f"GPU: {before.gpu} → {after.gpu} at step {after.first_step}",
        )
        for before, after in itertools.pairwise(segments)
    ]


def notes(annotations: Sequence[Annotation], segments: Sequence[GpuSegment]) -> list[Note]:
    """The run's annotations and its GPU changes, in step order (unstepped ones first)."""
    found = [Note(a.step, a.kind, a.text) for a in annotations]
    found += gpu_switch_notes(switched_segments(segments))
    return sorted(found, key=lambda n: (n.step is not None, n.step or 0))
