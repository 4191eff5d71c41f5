"""Token exemplar views: each token's trainer probability against the rollout engine's (the
write-ups' figure, where the gap grows as p → 0) and the worst tokens as table rows.

Exemplars arrive as dicts of the exemplars API (`rollout_logprob`, `trainer_logprob`, `step`,
`seq`, `pos`, `token`, `context`, …). Probabilities are exp(logprob), drawn on log–log axes; a
token whose probability is not a positive finite number on both sides (NaN, a logprob of -inf)
cannot sit on those axes, so it is counted in the title instead of silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from server.figures.empty import empty_figure
from server.figures.gaps import log_tickformat
from server.figures.palette import color
from server.figures.text import safe

DENSITY_ABOVE = 2000
"""More tokens than this in one chart: a density instead of points (a scatter of tens of
thousands of markers hides its own structure and weighs on the browser)."""


def log_ratio(exemplar: dict[str, Any]) -> float:
    """d = trainer_logprob - rollout_logprob (METRICS.md); NaN when either side is NaN."""
    return float(exemplar["trainer_logprob"]) - float(exemplar["rollout_logprob"])


def probabilities(exemplars: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, int]:
    """(rollout p, trainer p, how many tokens cannot be drawn) of the tokens on log axes."""
    lr = np.array([float(e["rollout_logprob"]) for e in exemplars], dtype=np.float64)
    lt = np.array([float(e["trainer_logprob"]) for e in exemplars], dtype=np.float64)
    with np.errstate(over="ignore"):
        pr, pt = np.exp(lr), np.exp(lt)
    drawable = np.isfinite(pr) & np.isfinite(pt) & (pr > 0) & (pt > 0)
    return pr[drawable], pt[drawable], int(np.count_nonzero(~drawable))


def probability_scatter(
    reports: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    *,
    title: str = "",
    density_above: int = DENSITY_ABOVE,
    height: int = 460,
    empty: str | None = None,
) -> go.Figure:
    """Trainer vs rollout probability per token, one colour per report (name, exemplars), on
    log–log axes with the diagonal of parity. Past `density_above` tokens in all, each report
    is drawn as density contours of log10 p instead of points. With no token at all and an
    `empty` message, that message instead of blank axes."""
    drawn = [(name, *probabilities(rows)) for name, rows in reports]
    total = sum(len(pr) for _, pr, _, _ in drawn)
    if total == 0 and empty is not None:
        return empty_figure(empty, title=title)
    dense = total > density_above
    fig = go.Figure()
    lo = min((float(min(pr.min(), pt.min())) for _, pr, pt, _ in drawn if len(pr)), default=1e-6)
    lo = max(min(lo, 1e-2), 1e-12)
    for index, (name, pr, pt, _) in enumerate(drawn):
        label = f"{safe(name)} ({len(pr)} tokens)"
        if dense:
            fig.add_trace(
                go.Histogram2dContour(
                    x=np.log10(pr),
                    y=np.log10(pt),
                    name=label,
                    showlegend=True,
                    showscale=False,
                    ncontours=12,
                    contours={"coloring": "lines"},
                    line={"color": color(index)},
                    colorscale=[[0, color(index)], [1, color(index)]],
                )
            )
        else:
            fig.add_trace(
                go.Scatter(
                    x=pr,
                    y=pt,
                    mode="markers",
                    name=label,
                    marker={"color": color(index), "size": 5, "opacity": 0.6},
                    hovertemplate="p rollout %{x:.3g}<br>p trainer %{y:.3g}<extra></extra>",
                )
            )
    edge = [math.log10(lo), 0.0] if dense else [lo, 1.0]
    fig.add_trace(
        go.Scatter(
            x=edge,
            y=edge,
            mode="lines",
            name="parity (p trainer = p rollout)",
            line={"color": "#888", "dash": "dash", "width": 1},
            hoverinfo="skip",
        )
    )
    hidden = sum(h for _, _, _, h in drawn)
    note = f" · {hidden} non-finite or zero-probability tokens not drawn" if hidden else ""
    axis = "log10 p" if dense else "p"
    fig.update_layout(
        title={"text": safe(title) + note, "x": 0.01},
        height=height,
        template="plotly_white",
        margin={"l": 60, "r": 10, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.18},
        xaxis_title=f"rollout {axis} = exp(rollout logprob)",
        yaxis_title=f"trainer {axis} = exp(trainer logprob)",
    )
    if not dense:
        fig.update_xaxes(type="log", tickformat=log_tickformat([lo, 1.0]))
        fig.update_yaxes(type="log", tickformat=log_tickformat([lo, 1.0]))
    return fig


def worst_rows(exemplars: Sequence[dict[str, Any]], *, limit: int = 50) -> list[dict[str, Any]]:
    """Table rows of the tokens with the largest |d| (non-finite first), worst first: the
    token and its context as text (a table cell never renders markup), both probabilities and
    the log-ratio."""

    def rank(e: dict[str, Any]) -> tuple[int, float]:
        d = abs(log_ratio(e))
        return (0, 0.0) if math.isnan(d) else (1, -d)

    rows = []
    for e in sorted(exemplars, key=rank)[:limit]:
        d = log_ratio(e)
        rows.append(
            {
                "report": e.get("report", ""),
                "step": e.get("step"),
                "kind": e.get("kind"),
                "seq": e.get("seq"),
                "pos": e.get("pos"),
                "token": e.get("token") if e.get("token") is not None else e.get("token_id"),
                "context": e.get("context") or "",
                "p_rollout": _fmt(_exp(e["rollout_logprob"])),
                "p_trainer": _fmt(_exp(e["trainer_logprob"])),
                "d": _fmt(d),
            }
        )
    return rows


WORST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("step", "step"),
    ("token", "token"),
    ("context", "context before it"),
    ("p_rollout", "p rollout"),
    ("p_trainer", "p trainer"),
    ("d", "d = lT − lR"),
    ("seq", "seq"),
    ("pos", "pos"),
    ("kind", "kind"),
)
"""Columns of a worst-token table: (row key, header)."""


def _exp(logprob: float) -> float:
    """exp of a logprob as sent: NaN stays NaN, an impossible positive one overflows to Inf."""
    try:
        return math.exp(logprob)
    except OverflowError:
        return math.inf


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"
