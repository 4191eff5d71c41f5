"""The rule preview's chart: the run's series with where the draft would fire and where the
rule as saved fires. Pure: takes points and would-be alerts, returns a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from server.domain.alarms import WouldBeAlert
from server.figures.points import Point

DRAFT_COLOUR = "#b00020"
CURRENT_COLOUR = "#1f5fa8"


def preview_figure(
    metric: str,
    points: Sequence[Point],
    draft: Sequence[WouldBeAlert],
    current: Sequence[WouldBeAlert],
    *,
    log_y: bool = False,
) -> go.Figure:
    """The curve of `metric`, the draft's firings as red triangles above it and today's as
    blue ones below (each at the step it fired, at the value it fired with)."""
    fig = go.Figure()
    steps = [p["step"] for p in points]
    values = [p["last"] for p in points]
    fig.add_trace(go.Scatter(x=steps, y=values, mode="lines", name=metric, line={"color": "#555"}))
    for name, alerts, colour, symbol in (
        ("draft fires", draft, DRAFT_COLOUR, "triangle-down"),
        ("saved rule fires", current, CURRENT_COLOUR, "triangle-up"),
    ):
        fig.add_trace(
            go.Scatter(
                x=[a.step for a in alerts],
                y=[a.value for a in alerts],
                mode="markers",
                name=f"{name} ({len(alerts)})",
                marker={"color": colour, "symbol": symbol, "size": 12},
                hovertext=[_hover(a) for a in alerts],
            )
        )
    layout: dict[str, Any] = {
        "height": 320,
        "margin": {"l": 50, "r": 10, "t": 30, "b": 40},
        "xaxis": {"title": "step"},
        "yaxis": {"title": metric, "type": "log" if log_y else "linear"},
        "legend": {"orientation": "h"},
    }
    fig.update_layout(**layout)
    return fig


def _hover(alert: WouldBeAlert) -> str:
    until = f" until step {alert.resolved_step}" if alert.resolved_step is not None else ""
    return (
        f"{alert.rule_name}: {alert.value:.4g} beyond {alert.threshold} at step {alert.step}{until}"
    )


def counts_line(draft: int, current: int, runs: int) -> str:
    return (
        f"On the project's {runs} most recent runs the draft would raise {draft} alert"
        f"{'s' if draft != 1 else ''}; the rule as saved raises {current}."
    )
