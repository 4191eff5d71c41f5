"""Empty states and log-axis floors as the figures build them, without a browser: a chart with
no data says where data comes from instead of drawing axes, and a value ≤ 0 on a log axis is a
marker at the floor with a note, never part of a line."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from server.figures.buckets import buckets_figure, heatmap_figure
from server.figures.empty import BUCKETS_HINT, is_empty_state
from server.figures.exemplars import probability_scatter
from server.figures.hardware import bucket_curves_figure
from server.figures.logfloor import NOTE
from server.figures.series import series_figure
from tests.dashboard.rows import bucket
from tests.dashboard.test_pure import point


def traces_named(fig: dict[str, Any], suffix: str) -> list[dict[str, Any]]:
    return [t for t in fig["data"] if t["name"].endswith(suffix)]


def test_zero_on_a_log_axis_is_a_floor_marker_not_part_of_the_line() -> None:
    values = [1e-3, 5e-4, 0.0, 2e-4, -1e-9, 1e-4]
    fig = series_figure([("k3_kl", [point(s, v) for s, v in enumerate(values)])], log_y=True)
    line = next(t for t in fig["data"] if t["name"] == "k3_kl")
    drawn = np.asarray(line["y"], dtype=np.float64)
    assert np.all(np.isnan(drawn[[2, 4]]))  # a gap where the axis cannot draw the value
    assert np.all(drawn[np.isfinite(drawn)] > 0)
    (floor,) = traces_named(fig, "≤ 0 (at floor)")
    assert floor["x"] == [2, 4]
    assert floor["yaxis"] == "y2" and fig["layout"]["yaxis2"]["range"][0] <= min(floor["y"])
    assert floor["mode"] == "markers"
    assert all(NOTE in text for text in floor["hovertext"])
    assert "= 0 at step 2" in floor["hovertext"][0] and "-1e-09" in floor["hovertext"][1]


def test_zero_on_a_linear_axis_stays_on_the_line() -> None:
    fig = series_figure([("k3_kl", [point(s, v) for s, v in enumerate([1.0, 0.0, 2.0])])])
    line = next(t for t in fig["data"] if t["name"] == "k3_kl")
    assert list(np.asarray(line["y"], dtype=np.float64)) == [1.0, 0.0, 2.0]
    assert traces_named(fig, "≤ 0 (at floor)") == []


def test_log_axis_band_and_smoothed_lines_never_hold_a_nonpositive_value() -> None:
    pts = [point(s, 1e-3, count=4, lo=0.0 if s == 4 else 1e-4, hi=2e-3) for s in range(0, 20, 4)]
    pts[2] = point(8, 0.0, count=4, lo=0.0, hi=0.0)
    fig = series_figure([("k3_kl", pts)], log_y=True, smoothing="ema")
    for trace in fig["data"]:
        if trace.get("yaxis") == "y2":
            continue
        ys = np.asarray(trace["y"], dtype=np.float64)
        assert not np.any(ys[np.isfinite(ys)] <= 0), trace["name"]
    (floor,) = traces_named(fig, "≤ 0 (at floor)")
    assert floor["x"] == [11]  # the bucket of steps 8–11 is drawn at its last step


def test_nan_is_still_a_nonfinite_marker_on_a_log_axis_not_a_floor_marker() -> None:
    fig = series_figure(
        [("k3_kl", [point(0, 1e-3), point(1, math.nan, nan=1), point(2, 1e-3)])], log_y=True
    )
    assert traces_named(fig, "≤ 0 (at floor)") == []
    assert len(traces_named(fig, "NaN/Inf")) == 1


def test_bucket_curve_with_a_zero_mean_marks_the_floor() -> None:
    rows = [
        bucket("H100", lo, hi, tokens=10.0, sum_abs_d=1.0, sum_k3=k3, steps=3)
        for lo, hi, k3 in ((0.0, 0.5, 0.0), (0.5, 1.0, 1e-3))
    ]
    fig = bucket_curves_figure(rows)
    line = next(t for t in fig.data if t.name == "H100")
    assert math.isnan(line.y[0]) and line.y[1] > 0
    floor = next(t for t in fig.data if t.name == "H100 ≤ 0 (at floor)")
    assert list(floor.x) == ["[0, 0.5)"] and NOTE in floor.hovertext[0]


def test_bucket_charts_without_rows_say_which_collector_call_sends_them() -> None:
    for fig in (buckets_figure([]), heatmap_figure([]), bucket_curves_figure([])):
        assert is_empty_state(fig)
        assert not fig.layout.xaxis.visible and not fig.layout.yaxis.visible
        (note,) = fig.layout.annotations
        assert note.text == BUCKETS_HINT and "run.log_step" in note.text


def test_bucket_chart_empty_message_can_be_the_callers() -> None:
    fig = buckets_figure([], empty="Choose one or more runs above.")
    assert fig.layout.annotations[0].text == "Choose one or more runs above."


def test_probability_scatter_without_tokens_shows_its_empty_message_when_given() -> None:
    assert is_empty_state(probability_scatter([("a", [])], empty="no exemplars"))
    assert not is_empty_state(probability_scatter([("a", [])]))
