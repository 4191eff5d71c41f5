"""Plotly renders a subset of HTML inside labels and hover text; user text is escaped first."""

from __future__ import annotations

import html


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
