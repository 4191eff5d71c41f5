"""Empty states: a figure that says what to do instead of drawing blank axes.

A chart with nothing to draw shows its axes, gridlines and a lone title, which reads as "broken"
or "zero". Where a chart has no data, it becomes a short text saying where the data comes from
and which call or option sends it: no axes, no gridlines, nothing to hover.
"""

from __future__ import annotations

import plotly.graph_objects as go

from server.domain import signal_views
from server.figures.text import safe

BUCKETS_HINT = (
    "No token-probability buckets here yet.<br>"
    "The collectors send them with each step logged as "
    "<b>run.log_step(step, rollout_logprobs=…, trainer_logprobs=…, mask=…)</b><br>"
    "(edges set by its <b>bucket_edges=</b> option); values logged with "
    "run.log_metrics or a framework's own metrics carry none."
)
"""Where bucket charts come from: only per-token logprobs give them."""


def empty_figure(message: str, *, title: str = "", height: int = 160) -> go.Figure:
    """A figure with no axes that shows `message` (Plotly's HTML subset; escape user text
    first) in its middle, under an optional escaped `title`."""
    fig = go.Figure()
    fig.add_annotation(
        text=message,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        showarrow=False,
        align="center",
        font={"size": 13, "color": "#555555"},
        name="empty-state",
    )
    fig.update_layout(
        title={"text": safe(title), "x": 0.01} if title else None,
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=height,
        template="plotly_white",
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
    )
    return fig


def is_empty_state(fig: go.Figure) -> bool:
    """Whether `fig` is an empty state (no traces, the message annotation)."""
    return not fig.data and any(a.name == "empty-state" for a in fig.layout.annotations)


def no_signal_figure() -> go.Figure:
    """The mismatch chart of a run that logs no mismatch signal: what is missing, how to log it."""
    return empty_figure(safe(signal_views.no_signal()).replace(": ", ":<br>", 1), title="mismatch")
