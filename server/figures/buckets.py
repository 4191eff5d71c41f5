"""Token-probability bucket views: mismatch per bucket, and bucket × step heatmaps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from server.domain.reads.series import BucketRow, BucketStep
from server.figures.empty import BUCKETS_HINT, empty_figure
from server.figures.gaps import log_tickformat
from server.figures.legend import LEGEND_ON_TOP
from server.figures.palette import color
from server.figures.text import safe


def bucket_label(lo: float, hi: float) -> str:
    return f"[{lo:g}, {hi:g})"


@dataclass(frozen=True)
class BucketMeans:
    """A bucket's sums as the charts draw them: per token."""

    lo: float
    hi: float
    tokens: float
    mean_abs_d: float
    mean_k3: float
    oob_share: float
    steps: int
    actors: int


def per_bucket(rows: Sequence[BucketRow]) -> dict[str, list[BucketMeans]]:
    """Rows grouped by `group`, each bucket with its mean |d|, mean k3 and out-of-bounds share."""
    groups: dict[str, list[BucketMeans]] = {}
    nan = float("nan")
    for row in rows:
        tokens = row.tokens or 0.0
        groups.setdefault(row.group, []).append(
            BucketMeans(
                row.lo,
                row.hi,
                tokens,
                mean_abs_d=row.sum_abs_d / tokens if tokens else nan,
                mean_k3=row.sum_k3 / tokens if tokens else nan,
                oob_share=row.oob / tokens if tokens else nan,
                steps=row.steps,
                actors=row.actors,
            )
        )
    return groups


def buckets_figure(
    rows: Sequence[BucketRow], *, title: str = "", empty: str = BUCKETS_HINT
) -> go.Figure:
    """Mean |d|, mean k3 and out-of-bounds share per bucket, one bar per group; without rows,
    the `empty` message (by default: which collector call sends buckets)."""
    if not rows:
        return empty_figure(empty, title=title)
    groups = per_bucket(rows)
    fig = make_subplots(
        rows=1, cols=3, subplot_titles=("mean |d|", "mean k3", "out-of-bounds share")
    )
    for index, (group, buckets) in enumerate(sorted(groups.items())):
        labels = [bucket_label(b.lo, b.hi) for b in buckets]
        behind = buckets[0].steps if buckets else 0
        name = f"{safe(group)} ({behind} steps)"
        for col, key in enumerate(("mean_abs_d", "mean_k3", "oob_share"), start=1):
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=[getattr(b, key) for b in buckets],
                    name=name,
                    marker_color=color(index),
                    legendgroup=name,
                    showlegend=col == 1,
                    hovertext=[f"{int(b.tokens)} tokens" for b in buckets],
                ),
                row=1,
                col=col,
            )
    k3 = (b.mean_k3 for bs in groups.values() for b in bs)
    fig.update_yaxes(type="log", tickformat=log_tickformat(k3), row=1, col=2)
    fig.update_layout(
        title={"text": safe(title), "x": 0.01},
        height=380,
        barmode="group",
        template="plotly_white",
        margin={"l": 50, "r": 10, "t": 90, "b": 60},
        legend={**LEGEND_ON_TOP, "y": 1.12},  # above the subplot titles too
        xaxis_title="p = exp(rollout logprob)",
    )
    return fig


def heatmap_figure(
    cells: Sequence[BucketStep],
    *,
    value: str = "mean_k3",
    title: str = "",
    empty: str = BUCKETS_HINT,
) -> go.Figure:
    """Mean k3 (or |d|) per bucket and step; without cells, the `empty` message."""
    if not cells:
        return empty_figure(empty, title=title)
    steps = sorted({c.step for c in cells})
    bins = sorted({(c.lo, c.hi) for c in cells})
    grid = [[float("nan")] * len(steps) for _ in bins]
    col = {s: i for i, s in enumerate(steps)}
    row = {b: i for i, b in enumerate(bins)}
    for c in cells:
        tokens = c.tokens
        v = (c.sum_k3 if value == "mean_k3" else c.sum_abs_d) / tokens if tokens else float("nan")
        grid[row[(c.lo, c.hi)]][col[c.step]] = v
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            x=steps,
            y=[bucket_label(*b) for b in bins],
            colorscale="Viridis",
            colorbar={"title": value},
        )
    )
    fig.update_layout(
        title={"text": safe(title), "x": 0.01},
        height=320,
        template="plotly_white",
        margin={"l": 90, "r": 10, "t": 35, "b": 30},
        xaxis_title="step",
    )
    return fig
