"""Lines true to the steps logged, and log axes that say their magnitude, without a browser:
a trace logged at steps 1–53 and 108–109 breaks over 54–107 instead of drawing a ramp there;
a run logged every 10 steps stays one line; every log axis labels its ticks with a format that
writes the exponent (or a plain number), never Plotly's bare "5, 2"."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from server.figures.gaps import gap_after, log_axis, log_tickformat, with_gaps
from server.figures.hardware import hardware_figure, ratio_figure
from server.figures.series import difference_figure, series_figure
from tests.dashboard.rows import box, pair
from tests.dashboard.test_pure import point

RESTARTED = [*range(1, 54), 108, 109]


def line_of(fig: dict[str, Any], name: str) -> tuple[Any, Any]:
    line = next(t for t in fig["data"] if t["name"] == name and t["mode"] == "lines")
    return np.asarray(line["x"], dtype=np.float64), np.asarray(line["y"], dtype=np.float64)


def segments(xs: Any, ys: Any) -> list[tuple[float, float]]:
    """The (first x, last x) of each unbroken run of finite values."""
    out: list[tuple[float, float]] = []
    start = None
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if math.isfinite(y) and start is None:
            start = x
        if start is not None and (not math.isfinite(y) or i == len(xs) - 1):
            out.append((start, x if math.isfinite(y) else xs[i - 1]))
            start = None
    return out


def test_a_trace_with_missing_steps_breaks_instead_of_drawing_a_ramp() -> None:
    fig = series_figure([("k3_kl", [point(s, 1e-3 + s * 1e-5) for s in RESTARTED])])
    xs, ys = line_of(fig, "k3_kl")
    assert segments(xs, ys) == [(1, 53), (108, 109)]


def test_a_smoothed_trace_breaks_at_the_same_gap() -> None:
    fig = series_figure([("k3_kl", [point(s, 1.0) for s in RESTARTED])], smoothing="ema")
    xs, ys = line_of(fig, "k3_kl")
    assert segments(xs, ys) == [(1, 53), (108, 109)]


def test_a_difference_to_the_reference_breaks_where_either_run_has_a_gap() -> None:
    reference = ("ref", [point(s, 1.0) for s in range(1, 110)])
    candidate = ("run", [point(s, 2.0) for s in RESTARTED])
    fig = difference_figure(reference, [candidate])
    (line,) = fig["data"]
    xs, ys = np.asarray(line["x"], dtype=np.float64), np.asarray(line["y"], dtype=np.float64)
    assert segments(xs, ys) == [(1, 53), (108, 109)]
    gappy_ref = ("ref", [point(s, 1.0) for s in RESTARTED])
    (line,) = difference_figure(gappy_ref, [("run", [point(80, 2.0)])])["data"]
    assert np.isnan(np.asarray(line["y"], dtype=np.float64)).all()  # no reference at step 80


def test_a_run_logged_every_ten_steps_is_one_line() -> None:
    pts = [point(s, 1.0) for s in range(0, 500, 10)]
    assert gap_after(pts) == []
    xs, ys = line_of(series_figure([("entropy", pts)]), "entropy")
    assert segments(xs, ys) == [(0, 490)]


def test_downsampled_buckets_break_only_where_no_bucket_holds_steps() -> None:
    buckets = [point(s, 1.0, count=10) for s in (0, 10, 20, 30, 200, 210)]
    assert gap_after(buckets) == [3]
    assert [p["step"] for p in with_gaps(buckets)] == [0, 10, 20, 30, 40, 200, 210]


def test_a_short_or_even_trace_has_no_gap() -> None:
    assert gap_after([point(1, 1.0), point(60, 1.0)]) == []
    assert gap_after([point(s, 1.0) for s in range(5)]) == []


def test_log_tick_format_writes_exponents_for_small_values_and_plain_numbers_otherwise() -> None:
    assert log_tickformat([5e-4, 2e-3, math.nan, 0.0]) == "~e"
    assert log_tickformat([3.0, 40.0]) == "~g"
    assert log_tickformat([2e5]) == "~e"


def test_every_log_axis_carries_a_tick_format() -> None:
    k3 = series_figure([("k3_kl", [point(s, 5e-4 * (1 + s % 3)) for s in range(30)])], log_y=True)
    assert k3["layout"]["yaxis"] == log_axis([5e-4]) | {"tickformat": "~e"}
    boxes = hardware_figure([box("H100", 1e-3), box("A100", 4e-3)]).to_plotly_json()["layout"]
    assert boxes["yaxis"]["type"] == "log" and boxes["yaxis"]["tickformat"] == "~e"
    linear = series_figure([("entropy", [point(s, 1.0) for s in range(3)])])
    assert linear["layout"]["yaxis"] == {"type": "linear"}


def test_ratio_axis_around_one_writes_plain_numbers() -> None:
    found = pair("A100", "H100", 2.0, 1.5, 2.5, "A100 is 2× H100")
    layout = ratio_figure([found]).to_plotly_json()["layout"]
    assert layout["xaxis"]["type"] == "log" and layout["xaxis"]["tickformat"] == "~g"
