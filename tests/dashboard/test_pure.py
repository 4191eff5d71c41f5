"""The dashboard's pure parts: smoothing, divergence, config diff, URL state, figures."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from dashboard.urlstate import encode, parse
from server.domain.parity import diff, flatten
from server.figures.analysis import ema, first_divergence, running_mean
from server.figures.buckets import buckets_figure, per_bucket
from server.figures.hardware import hardware_figure
from server.figures.series import series_figure
from server.figures.text import safe, sparkline
from tests.dashboard.rows import box, bucket


def point(
    step: int,
    value: float,
    *,
    count: int = 1,
    lo: float | None = None,
    hi: float | None = None,
    nan: int = 0,
) -> dict[str, object]:
    return {
        "step": step,
        "step_end": step + count - 1,
        "time": 1.0 * step,
        "min": lo if lo is not None else value,
        "max": hi if hi is not None else value,
        "mean": value,
        "last": value,
        "count": count,
        "nan": nan,
        "pos_inf": 0,
        "neg_inf": 0,
    }


def test_ema_matches_a_debiased_reference() -> None:
    values = [1.0, 2.0, float("nan"), 4.0]
    weight = 0.5
    # by hand: s1 = .5 -> /.5; s2 = .25 + 1 = 1.25 -> /.75; NaN repeats; s3 = 2.625 -> /.875
    assert ema(values, weight) == pytest.approx([1.0, 1.25 / 0.75, 1.25 / 0.75, 2.625 / 0.875])


def test_running_mean_uses_the_last_window() -> None:
    assert running_mean([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]


def test_first_divergence_needs_a_sustained_exit() -> None:
    rng = np.random.default_rng(0)
    ref = [(s, 1e-3 * (1 + 0.05 * rng.standard_normal())) for s in range(100)]
    blip = [(s, v * (10 if s == 30 else 1)) for s, v in ref]
    shifted = [(s, v * (10 if s >= 60 else 1)) for s, v in ref]
    with_nan = [(s, math.nan if s >= 70 else v) for s, v in ref]
    assert first_divergence(ref, blip, sustain=5) is None
    assert first_divergence(ref, shifted, sustain=5) == 60
    assert first_divergence(ref, with_nan, sustain=3) == 70
    assert first_divergence(ref, ref) is None


def test_config_diff_orders_parity_keys_first_and_skips_equal_ones() -> None:
    configs = {
        "v0": {
            "engine": {"version": "0.8.5", "logprobs_mode": "processed_logprobs", "model": "m"},
            "lr": 1e-6,
            "host": {"pid": 1},
        },
        "v1": {
            "engine": {"version": "0.18.1", "logprobs_mode": "raw_logprobs", "model": "m"},
            "lr": 2e-6,
            "host": {"pid": 2},
        },
    }
    rows = diff(configs)
    assert [r["key"] for r in rows] == ["engine.logprobs_mode", "engine.version", "lr"]
    assert rows[0]["parity"] and "mean offset" in rows[0]["why"]
    assert rows[2]["why"] == ""
    assert flatten({"a": {"b": {"c": 1}}, "d": [1, 2]}) == {"a.b.c": "1", "d": "[1, 2]"}


def test_url_state_round_trips() -> None:
    state = {"runs": ["a", "b"], "ref": "a", "k": 3.0, "empty": None}
    assert parse(encode(state)) == {"runs": "a,b", "ref": "a", "k": "3.0"}


def test_series_figure_draws_band_line_and_nonfinite_markers() -> None:
    points = [point(0, 1.0, count=2, lo=0.5, hi=5.0), point(2, 2.0, count=2, nan=1)]
    fig = series_figure([("k3_kl", points)], title="t", log_y=True)
    names = [t["name"] for t in fig["data"]]
    assert names == ["k3_kl max", "k3_kl min–max", "k3_kl", "k3_kl NaN/Inf"]
    assert list(fig["data"][0]["y"]) == [5.0, 2.0]
    assert fig["layout"]["yaxis"]["type"] == "log"
    smoothed = series_figure([("x", [point(s, float(s)) for s in range(5)])], smoothing="ema")
    assert [t["name"] for t in smoothed["data"]] == ["x (raw)", "x"]
    # The figure is valid Plotly: the graph objects accept it unchanged.
    assert go.Figure(fig).data[2].name == "k3_kl"


def test_user_text_is_escaped_in_figures() -> None:
    fig = series_figure([("<img src=x onerror=alert(1)>", [point(0, 1.0)])])
    assert fig["data"][0]["name"] == "&lt;img src=x onerror=alert(1)&gt;"
    assert safe("<b>") == "&lt;b&gt;"


def test_bucket_means_are_sums_over_tokens() -> None:
    rows = [bucket("g", 0.0, 0.5, tokens=4.0, sum_abs_d=2.0, sum_k3=0.4, oob=1.0, steps=3)]
    (means,) = per_bucket(rows)["g"]
    assert (means.mean_abs_d, means.mean_k3, means.oob_share) == (0.5, 0.1, 0.25)
    assert len(buckets_figure(rows).data) == 3


def test_hardware_boxes_come_from_quantiles() -> None:
    rows = [box("H20", 2.0, actors=2, steps=10), box("none", None, steps=0)]
    fig = hardware_figure(rows)
    assert len(fig.data) == 1
    assert list(fig.data[0].median) == [2.0]


def test_sparkline_marks_nonfinite() -> None:
    assert sparkline([0.0, 1.0, float("nan")]) == "▁█×"
