"""Metric curves: downsampling bands, smoothing, non-finite markers, annotations, alarms.

Figures are plain dicts in Plotly's JSON form, not `plotly.graph_objects`: a run page redraws
a dozen panels on every live tick, and validating graph objects (and copying their template)
cost far more than the read behind them. The look is plotly_white's, taken from Plotly once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import plotly.io as pio

from server.domain.reads.runs import GpuSegment
from server.domain.series import bucket_value, has_nonfinite
from server.figures.analysis import ema, running_mean
from server.figures.gaps import drawn_values, is_gap, log_axis, with_gaps
from server.figures.legend import LEGEND_ON_TOP
from server.figures.logfloor import floor_axis, floor_marks, nonpositive, without_nonpositive
from server.figures.palette import NONFINITE, color, faint
from server.figures.points import Mark, Note, Point
from server.figures.text import safe

Figure = dict[str, Any]
Trace = dict[str, Any]


@cache
def _style() -> dict[str, Any]:
    """plotly_white's layout, the parts a 2-D chart uses."""
    layout = pio.templates["plotly_white"].to_plotly_json()["layout"]
    keep = ("font", "hovermode", "hoverlabel", "paper_bgcolor", "plot_bgcolor", "colorway")
    return {"layout": {k: layout[k] for k in (*keep, "xaxis", "yaxis") if k in layout}}


def figure(traces: list[Trace], layout: dict[str, Any]) -> Figure:
    return {"data": traces, "layout": {"template": _style(), **layout}}


def vline(x: float, line: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": line,
    }


def hline(y: float, line: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": line,
    }


def _x(points: Sequence[Point], x_axis: str) -> Any:
    if x_axis == "aligned":  # placed by dashboard.alignment: each point carries its own x
        return _floats((p["x"] for p in points), np.float64)
    if x_axis == "time":
        return _floats((p.get("time") for p in points), np.float64)
    return np.fromiter(
        (p["step_end"] if p["count"] > 1 else p["step"] for p in points), np.int64, len(points)
    )


def _y(points: Sequence[Point]) -> Any:
    return _floats(bucket_value(p) for p in points)


def _floats(values: Any, dtype: Any = np.float32) -> Any:
    """An array to draw (None becomes NaN, a gap). Arrays, unlike lists, travel to the browser
    as packed binary (base64 typed arrays), smaller than JSON text and faster to parse; values
    go as float32 — seven significant digits are more than a plot shows, at half the bytes —
    wall times as float64. The stored series and CSV exports keep full precision."""
    return np.array([math.nan if v is None else v for v in values], dtype=dtype)


def smooth(values: Sequence[float], mode: str, weight: float) -> list[float]:
    if mode == "ema":
        return ema(values, weight)
    if mode == "mean":
        return running_mean(values, max(1, int(weight)))
    return list(values)


def add_series(
    traces: list[Trace],
    name: str,
    points: Sequence[Point],
    index: int,
    *,
    x_axis: str = "step",
    smoothing: str = "none",
    weight: float = 0.6,
    line_color: str | None = None,
    log_y: bool = False,
) -> None:
    """One run's curve: min/max band where buckets hold several steps, the (smoothed) line with
    the original faint underneath, and ✕ markers where a bucket holds NaN or ±Inf. On a log
    axis (`log_y`), values ≤ 0 leave a gap and get a marker at the axis floor instead. On a
    step or time axis the line breaks where the steps jump over a gap (`gaps.with_gaps`)."""
    if x_axis != "aligned":
        points = with_gaps(points)
    c = line_color or color(index)
    label = safe(name)
    xs, ys = _x(points, x_axis), _y(points)
    drawable = without_nonpositive if log_y else (lambda v: v)
    if any(p["count"] > 1 for p in points):
        traces.extend(_band(xs, points, label, c, drawable))
    floor = nonpositive(ys) if log_y else None
    if floor is not None and floor.any():
        x_name = {"step": "step", "time": "time"}.get(x_axis, "x")
        traces.append(floor_marks(xs[floor], ys[floor], name=label, color=c, x_name=x_name))
    if smoothing != "none":
        traces.append(
            {
                "type": "scatter",
                "x": xs,
                "y": drawable(ys),
                "mode": "lines",
                "line": {"color": faint(c, 0.35), "width": 1},
                "name": f"{label} (raw)",
                "showlegend": False,
                "legendgroup": label,
            }
        )
        ys = np.asarray(smooth(ys.tolist(), smoothing, weight), dtype=np.float32)
        ys[[i for i, p in enumerate(points) if is_gap(p)]] = np.nan  # smoothing bridges gaps
    traces.append(
        {
            "type": "scatter",
            "x": xs,
            "y": drawable(ys),
            "mode": "lines",
            "line": {"color": c, "width": 2},
            "name": label,
            "legendgroup": label,
            "connectgaps": False,
        }
    )
    bad = [p for p in points if has_nonfinite(p)]
    if bad:
        finite = ys[np.isfinite(ys)]
        top = float(finite.max()) if finite.size else 1.0
        traces.append(
            {
                "type": "scatter",
                "x": _x(bad, x_axis),
                "y": [top] * len(bad),
                "mode": "markers",
                "marker": {"symbol": "x", "size": 11, "color": NONFINITE, "line": {"width": 2}},
                "name": f"{label} NaN/Inf",
                "legendgroup": label,
                "hovertext": [
                    f"NaN×{p['nan']} +Inf×{p['pos_inf']} -Inf×{p['neg_inf']}" for p in bad
                ],
                "hoverinfo": "text+x",
            }
        )


def _band(
    xs: Any, points: Sequence[Point], label: str, c: str, drawable: Callable[[Any], Any]
) -> list[Trace]:
    """The min–max band of buckets that hold several steps: where a spike lives when zoomed
    out (an invisible upper edge, filled down to the lower one); `drawable` takes out what the
    axis cannot draw."""
    return [
        {
            "type": "scatter",
            "x": xs,
            "y": drawable(_floats(p[edge] for p in points)),
            "mode": "lines",
            "line": {"width": 0},
            **({"fill": fill, "fillcolor": faint(c)} if fill else {}),
            "hoverinfo": "skip",
            "showlegend": False,
            "name": f"{label} {'max' if edge == 'max' else 'min–max'}",
            "legendgroup": label,
        }
        for edge, fill in (("max", None), ("min", "tonexty"))
    ]


def series_figure(
    series: Sequence[tuple[str, Sequence[Point]]],
    *,
    title: str = "",
    subtitle: str = "",
    log_y: bool = False,
    x_axis: str = "step",
    smoothing: str = "none",
    weight: float = 0.6,
    annotations: Sequence[Note] = (),
    alerts: Sequence[Mark] = (),
    segments: Sequence[GpuSegment] = (),
    height: int = 300,
    x_title: str | None = None,
) -> Figure:
    """Curves of one metric group (several metrics or several runs) on one axis; `segments`
    (a run's GPU segments, when it changed GPU type) shade the steps of each GPU in its colour.
    `x_axis` "aligned" draws each point at its own `x` (see `dashboard.alignment`), titled
    `x_title`. A `subtitle` (what the chart's metric means) goes under the title, smaller."""
    traces: list[Trace] = []
    drawing: dict[str, Any] = {"smoothing": smoothing, "weight": weight, "log_y": log_y}
    for index, (name, points) in enumerate(series):
        add_series(traces, name, points, index, x_axis=x_axis, **drawing)
    shapes: list[dict[str, Any]] = []
    if x_axis == "step":
        shapes += segment_bands(segments)
        noted = [(n.step, n) for n in annotations if n.step is not None]
        for step, note in noted:
            dash = "dot" if note.kind == "weight_update" else "dash"
            shapes.append(vline(step, {"color": "#999999", "dash": dash, "width": 1}))
        if noted:
            traces.append(
                _marks(
                    [step for step, _ in noted],
                    0,
                    "triangle-up",
                    9,
                    "#999999",
                    "annotations",
                    [safe(n.text)[:300] for _, n in noted],
                )
            )
        if alerts:
            traces.append(
                _marks(
                    [a.step for a in alerts],
                    1,
                    "diamond",
                    11,
                    "#D55E00",
                    "alarms",
                    [safe(f"{a.rule}: {a.state}") for a in alerts],
                )
            )
    return figure(
        traces,
        {
            "title": {
                "text": _title(title, subtitle),
                "x": 0.01,
                "font": {"size": 14},
                # a subtitle takes a second line: both sit above the legend, not beside it
                **({"y": 0.93, "yref": "container", "yanchor": "top"} if subtitle else {}),
            },
            "height": height + (25 if subtitle else 0),
            "margin": {"l": 50, "r": 10, "t": 85 if subtitle else 55, "b": 40},
            "legend": LEGEND_ON_TOP,
            "yaxis": log_axis(drawn_values(series)) if log_y else {"type": "linear"},
            "yaxis2": floor_axis(),
            "xaxis": {
                "title": {"text": x_title or ("step" if x_axis == "step" else "time")},
                **(_step_ticks(series) if x_axis == "step" else {}),
            },
            "shapes": shapes,
            "uirevision": title,
        },
    )


SHORT_SPAN = 10
"""Steps a chart spans at most to get a tick on every step."""


def _step_ticks(series: Sequence[tuple[str, Sequence[Point]]]) -> dict[str, Any]:
    """Whole-number ticks for a step axis. Over a few steps Plotly's automatic ticks fall on
    halves, which a whole-number format prints twice ("0 1 1 2 2"): a short run gets one tick
    per step instead."""
    steps = [p["step"] for _, points in series for p in points if p.get("step") is not None]
    short = bool(steps) and max(steps) - min(steps) <= SHORT_SPAN
    return {"tickformat": ",d", **({"tick0": 0, "dtick": 1} if short else {})}


def _title(title: str, subtitle: str) -> str:
    """The title, and under it the subtitle in small grey type (both escaped)."""
    if not subtitle:
        return safe(title)
    return f"{safe(title)}<br><span style='font-size:11px;color:#555'>{safe(subtitle)}</span>"


def segment_bands(segments: Sequence[GpuSegment]) -> list[dict[str, Any]]:
    """Shaded step ranges, one colour per GPU type (by name order among the run's GPU types),
    drawn only when the run has more than one segment: one GPU throughout needs no shading."""
    if len(segments) < 2:
        return []
    order = {gpu: i for i, gpu in enumerate(sorted({s.gpu for s in segments}))}
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": s.first_step - 0.5,
            "x1": s.last_step + 0.5,
            "y0": 0,
            "y1": 1,
            "fillcolor": faint(color(order[s.gpu]), 0.12),
            "line": {"width": 0},
            "layer": "below",
            "name": safe(s.gpu),
        }
        for s in segments
    ]


def zoomed(fig: Figure, step_min: int | None, step_max: int | None) -> Figure:
    """The figure with its x axis set to [step_min, step_max] (as far as each is given)."""
    if step_min is None and step_max is None:
        return fig
    layout = fig["layout"]
    xaxis = {**layout.get("xaxis", {}), "range": [step_min, step_max], "autorange": False}
    return {**fig, "layout": {**layout, "xaxis": xaxis}}


def _marks(
    xs: list[Any], y: float, symbol: str, size: int, fill: str, name: str, texts: list[str]
) -> Trace:
    """Markers along the top axis band (annotations, alarms), their text on hover."""
    return {
        "type": "scatter",
        "x": xs,
        "y": [y] * len(xs),
        "yaxis": "y2",
        "mode": "markers",
        "marker": {"symbol": symbol, "size": size, "color": fill},
        "name": name,
        "hovertext": texts,
        "hoverinfo": "text+x",
    }


def difference_figure(
    reference: tuple[str, Sequence[Point]],
    candidates: Sequence[tuple[str, Sequence[Point]]],
    *,
    title: str = "",
    divergence: Mapping[str, float | None] | None = None,
    x_key: str = "step",
    x_title: str | None = None,
) -> Figure:
    """Each candidate minus the reference at the candidate's positions, the reference linearly
    interpolated there. Positions are each point's `x_key`: its step, or its `x` once placed by
    `dashboard.alignment`; `divergence` is in the same units. By step, a gap in either run's
    steps breaks the line: nothing is interpolated over steps the reference never logged."""
    ref_name, ref_points = reference
    if x_key == "step":
        ref_points = with_gaps(ref_points)
    rx = np.array([p[x_key] for p in ref_points], dtype=float)
    ry = _y(ref_points).astype(np.float64)
    traces: list[Trace] = []
    shapes = [hline(0, {"color": "#000000", "width": 1})]
    for index, (name, points) in enumerate(candidates, start=1):
        points = with_gaps(points) if x_key == "step" else points
        cx = np.array([p[x_key] for p in points], dtype=float)
        cy = _y(points).astype(np.float64)
        if len(rx) == 0 or len(cx) == 0:
            continue
        traces.append(
            {
                "type": "scatter",
                "x": cx,
                "y": cy - np.interp(cx, rx, ry),
                "mode": "lines",
                "line": {"color": color(index), "width": 2},
                "name": f"{safe(name)} − {safe(ref_name)}",
            }
        )
        step = (divergence or {}).get(name)
        if step is not None:
            shapes.append(vline(step, {"color": color(index), "dash": "dash"}))
    return figure(
        traces,
        {
            "title": {"text": safe(title), "x": 0.01},
            "height": 360,
            "margin": {"l": 50, "r": 10, "t": 35, "b": 30},
            "legend": {"orientation": "h", "y": -0.2},
            "shapes": shapes,
            **({"xaxis": {"title": {"text": x_title}}} if x_title else {}),
        },
    )
