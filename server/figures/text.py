"""Plotly renders a subset of HTML inside labels and hover text; user text is escaped first."""

from __future__ import annotations

import html

from server.domain import signal_views, signals


def safe(text: object) -> str:
    return html.escape(str(text), quote=True)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """A text sparkline: safe anywhere, readable in a table cell."""
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    out = []
    for v in values:
        if v != v or abs(v) == float("inf"):
            out.append("×")
        else:
            out.append(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1) + 0.5))])
    return "".join(out)


# Said of a view (or of some of its runs) when retention dropped the raw values: each point is a
# step block's min/max/mean, however far one zooms in.
ROLLUPS_ONLY = "drawn from rollups (raw values dropped by retention)"


def rollups_note(runs: list[str]) -> str:
    """A title's suffix naming the runs drawn from rollups only; empty when there are none."""
    return f" · {ROLLUPS_ONLY}: {', '.join(runs)}" if runs else ""


def named(metric: str) -> str:
    """A metric in a title: a mismatch signal by its label with its metric name beside it
    ("mean |logp diff| (abs_logp_diff_mean)"), a family by its common scale, any other metric
    by its name."""
    scale = signal_views.SCALES.get(metric)
    if scale is not None:
        return f"{scale.label}, each run's own signal on the family's {scale.unit} scale"
    signal = signals.BY_METRIC.get(metric)
    return metric if signal is None else f"{signal.label} ({metric})"
