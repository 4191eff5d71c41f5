"""Mismatch per GPU type: box plots from server-side quantiles (no raw values shipped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from dashboard.figures.text import safe
from dashboard.palette import color


def hardware_figure(rows: Sequence[dict[str, Any]], *, metric: str = "k3_kl") -> go.Figure:
    fig = go.Figure()
    for index, row in enumerate(rows):
        if row.get("median") is None:
            continue
        counts = f"{row['steps']} steps · {row['actors']} actors · {row['runs']} runs"
        label = f"{safe(row['gpu'])}<br>{counts}"
        fig.add_trace(
            go.Box(
                name=label,
                q1=[row["q1"]],
                median=[row["median"]],
                q3=[row["q3"]],
                lowerfence=[row["p05"]],
                upperfence=[row["p95"]],
                mean=[row["mean"]],
                marker_color=color(index),
                boxpoints=False,
            )
        )
    fig.update_layout(
        title={"text": f"{safe(metric)} per GPU type (box: quartiles, whiskers: 5–95%)", "x": 0.01},
        yaxis={"type": "log", "title": safe(metric)},
        height=380,
        template="plotly_white",
        showlegend=False,
        margin={"l": 60, "r": 10, "t": 40, "b": 80},
    )
    return fig
