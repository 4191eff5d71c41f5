"""The run page's token exemplars: shown only when the run logged some (`log_step(...,
exemplars=K)`), for a chosen step range — each token's trainer probability against the
engine's, and the worst tokens with their context.

A section of the run page of its own, included by `run.py` through `section` and `register`,
so the run page's other parts change without touching this one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from server.domain.reads.scope import ReadScope
from server.figures.exemplars import WORST_COLUMNS, probability_scatter, worst_rows
from server.services.reads.port import Reads

LIMIT = 5000
"""Exemplars read for one view: the worst of the range (reads rank by |d|)."""
INPUT = {"width": "110px", "marginRight": "12px"}


def section(
    reads: Reads,
    scope: ReadScope,
    run_id: str,
    *,
    project: str | None,
    step_min: int | None = None,
    step_max: int | None = None,
) -> Any:
    """The section, or None when the run has no exemplars (one row is read to know); `scope`
    is the reader's, narrowed to `project` when the page was opened for one."""
    if not reads.runs.exemplars(scope, run_id, limit=1):
        return None
    return html.Div(
        [
            html.H4("Token exemplars"),
            dcc.Store(id=ids.RUN_EX_RUN, data={"run": run_id, "project": project}),
            html.Span("steps from "),
            dcc.Input(id=ids.RUN_EX_STEP_MIN, type="number", min=0, value=step_min, style=INPUT),
            html.Span("to "),
            dcc.Input(id=ids.RUN_EX_STEP_MAX, type="number", min=0, value=step_max, style=INPUT),
            dcc.Graph(id=ids.RUN_EX_SCATTER, config={"displaylogo": False}),
            DataTable(
                id=ids.RUN_EX_TABLE,
                columns=[{"name": header, "id": key} for key, header in WORST_COLUMNS],
                data=[],
                page_size=20,
                style_cell={
                    "fontFamily": "sans-serif",
                    "fontSize": "13px",
                    "textAlign": "left",
                    "whiteSpace": "normal",
                    "maxWidth": "420px",
                },
            ),
        ],
        id=ids.RUN_EXEMPLARS,
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.RUN_EX_SCATTER, "figure"),
        Output(ids.RUN_EX_TABLE, "data"),
        Input(ids.RUN_EX_STEP_MIN, "value"),
        Input(ids.RUN_EX_STEP_MAX, "value"),
        State(ids.RUN_EX_RUN, "data"),
    )
    def _draw(lo: object, hi: object, run: dict[str, str | None]) -> Any:
        scope = reader().narrowed(run.get("project"))
        return view(reads, scope, str(run["run"]), lo, hi)


def view(
    reads: Reads, scope: ReadScope, run_id: str, lo: object, hi: object
) -> tuple[Any, list[dict[str, Any]]]:
    """The scatter and the worst-token rows of the run's exemplars over steps [lo, hi] (as
    typed into the boxes: anything but a step reads as none)."""
    first, last = _step(lo), _step(hi)
    if first is not None and last is not None and first > last:
        first, last = last, first
    rows = [
        asdict(e)
        for e in reads.runs.exemplars(scope, run_id, step_min=first, step_max=last, limit=LIMIT)
    ]
    span = f"steps {first if first is not None else 'first'}–{last if last is not None else 'last'}"
    figure = probability_scatter(
        [(f"{run_id}", rows)], title=f"trainer vs rollout probability per token · {span}"
    )
    return figure, worst_rows(rows, limit=200)


def _step(value: object) -> int | None:
    """A step typed into a box as a step the API takes: whole, within 0 … 2**53; else none."""
    if not isinstance(value, (int, float, str)):
        return None
    try:
        return min(max(int(value), 0), 2**53)
    except (ValueError, OverflowError):
        return None
