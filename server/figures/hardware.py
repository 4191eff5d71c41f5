"""Mismatch per GPU type: box plots from server-side quantiles (no raw values shipped), the ratios
between GPU types with their intervals, and mismatch against token probability per GPU type.

Every figure names its categories explicitly on a category axis: a box given only quantiles and
a name would sit at x = 0, and a GPU called "4090" would be read as a number. Legends sit above
the plot, right-aligned, clear of every axis title.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go

from server.domain.reads.hardware import HardwareRow, Pair
from server.domain.reads.series import BucketRow
from server.figures.buckets import bucket_label, per_bucket
from server.figures.empty import BUCKETS_HINT, empty_figure
from server.figures.gaps import log_axis
from server.figures.legend import LEGEND_ON_TOP
from server.figures.logfloor import floor_axis, floor_marks, nonpositive, without_nonpositive
from server.figures.palette import color
from server.figures.text import safe


def gpu_colors(gpus: Iterable[str]) -> dict[str, str]:
    """One colour per GPU type, by name order, so every figure of a comparison agrees."""
    return {gpu: color(i) for i, gpu in enumerate(sorted(set(gpus)))}


def hardware_figure(rows: Sequence[HardwareRow], *, metric: str = "k3_kl") -> go.Figure:
    """One box per GPU type at its own category (its name), quartiles and 5–95% whiskers."""
    colors = gpu_colors(row.gpu for row in rows)
    fig = go.Figure()
    for row in rows:
        if row.median is None:
            continue
        counts = f"{row.steps} steps · {row.actors} actors · {row.runs} runs"
        fig.add_trace(
            go.Box(
                x=[safe(row.gpu)],
                name=safe(row.gpu),
                q1=[row.q1],
                median=[row.median],
                q3=[row.q3],
                lowerfence=[row.p05],
                upperfence=[row.p95],
                mean=[row.mean],
                marker_color=colors[row.gpu],
                boxpoints=False,
                hovertext=counts,
            )
        )
    fig.update_layout(
        title={"text": f"{safe(metric)} per GPU type (box: quartiles, whiskers: 5–95%)", "x": 0.01},
        xaxis={"type": "category", "title": {"text": "GPU type"}},
        yaxis=log_axis(
            (v for r in rows for v in (r.p05, r.p95) if v is not None),
            title={"text": safe(metric)},
        ),
        height=380,
        template="plotly_white",
        showlegend=False,
        margin={"l": 60, "r": 10, "t": 40, "b": 60},
    )
    return fig


def ratio_figure(pairs: Sequence[Pair], *, metric: str = "k3_kl") -> go.Figure:
    """Each pair's ratio of medians with its interval, on a log axis with 1 (no difference)
    marked: an interval that crosses the line does not tell the GPU types apart."""
    shown = [
        (p, p.ratio, p.ci_low, p.ci_high)
        for p in pairs
        if p.ratio is not None and p.ci_low is not None and p.ci_high is not None
    ]
    labels = [f"{safe(p.a)} / {safe(p.b)}" for p, *_ in shown]
    fig = go.Figure(
        go.Scatter(
            x=[ratio for _, ratio, _, _ in shown],
            y=labels,
            mode="markers",
            marker={"size": 10, "color": color(0)},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [high - ratio for _, ratio, _, high in shown],
                "arrayminus": [ratio - low for _, ratio, low, _ in shown],
            },
            hovertext=[safe(p.sentence) for p, *_ in shown],
            hoverinfo="text",
            name="ratio",
        )
    )
    fig.add_vline(x=1.0, line={"color": "#888888", "dash": "dash", "width": 1})
    fig.update_layout(
        title={"text": f"ratio of median {safe(metric)} (95% interval)", "x": 0.01},
        xaxis=log_axis(
            (v for _, _, low, high in shown for v in (low, high)),
            title={"text": "ratio (A / B)"},
        ),
        yaxis={"type": "category", "automargin": True},
        height=max(200, 80 + 50 * len(shown)),
        template="plotly_white",
        showlegend=False,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
    )
    return fig


def bucket_curves_figure(rows: Sequence[BucketRow], *, value: str = "mean_k3") -> go.Figure:
    """Mismatch per token-probability bucket, one line per GPU type (bucket rows grouped by
    GPU): where in the probability range the GPU types differ. Without rows, which collector
    call sends buckets."""
    if not rows:
        return empty_figure(BUCKETS_HINT, title="mismatch per token-probability bucket")
    groups = per_bucket(rows)
    colors = gpu_colors(groups)
    fig = go.Figure()
    for gpu, buckets in sorted(groups.items()):
        labels = [bucket_label(b.lo, b.hi) for b in buckets]
        ys = np.array([getattr(b, value) for b in buckets], dtype=np.float64)
        floor = nonpositive(ys)
        if floor.any():  # a bucket with a mean of 0: a marker at the floor, not a plunge
            fig.add_trace(
                floor_marks(
                    np.array(labels)[floor],
                    ys[floor],
                    name=safe(gpu),
                    color=colors[gpu],
                    x_name="bucket",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=without_nonpositive(ys),
                mode="lines+markers",
                name=safe(gpu),
                line={"color": colors[gpu]},
                hovertext=[f"{int(b.tokens)} tokens" for b in buckets],
            )
        )
    fig.update_layout(
        title={"text": f"{value.replace('_', ' ')} per token-probability bucket", "x": 0.01},
        xaxis={"type": "category", "title": {"text": "p = exp(rollout logprob)"}},
        yaxis=log_axis(
            (float(getattr(b, value)) for bs in groups.values() for b in bs),
            title={"text": value.replace("_", " ")},
        ),
        yaxis2=floor_axis(),
        height=380,
        template="plotly_white",
        legend=LEGEND_ON_TOP,
        margin={"l": 60, "r": 10, "t": 70, "b": 60},
    )
    return fig
