"""The run page's token exemplars: shown only when the run logged some (`log_step(...,
exemplars=K)`), for a chosen step range — each token's trainer probability against the
engine's, and the worst tokens with their context.

A section of the run page of its own, included by `run.py` through `section` and `register`,
so the run page's other parts change without touching this one.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.components import DataTable
from dashboard.figures.exemplars import WORST_COLUMNS, probability_scatter, worst_rows
from dashboard.query import QueryLike, dump

LIMIT = 5000
"""Exemplars read for one view: the worst of the range (reads rank by |d|)."""
INPUT = {"width": "110px", "marginRight": "12px"}


def section(
    query: QueryLike,
    run_id: str,
    *,
    project: str | None,
    step_min: int | None = None,
    step_max: int | None = None,
) -> Any:
    """The section, or None when the run has no exemplars (one row is read to know)."""
    scope = [project] if project else None
    if not query.exemplars(run_id, limit=1, projects=scope):
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


def register(app: Any, query: QueryLike, **_: Any) -> None:
    @app.callback(
        Output(ids.RUN_EX_SCATTER, "figure"),
        Output(ids.RUN_EX_TABLE, "data"),
        Input(ids.RUN_EX_STEP_MIN, "value"),
        Input(ids.RUN_EX_STEP_MAX, "value"),
        State(ids.RUN_EX_RUN, "data"),
    )
    def _draw(lo: int | None, hi: int | None, run: dict[str, Any]) -> Any:
        return view(query, run["run"], run.get("project"), lo, hi)


def view(
    query: QueryLike, run_id: str, project: str | None, lo: int | None, hi: int | None
) -> tuple[Any, list[dict[str, Any]]]:
    """The scatter and the worst-token rows of the run's exemplars over steps [lo, hi]."""
    lo, hi = _step(lo), _step(hi)
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    rows = dump(
        query.exemplars(
            run_id,
            step_min=lo,
            step_max=hi,
            limit=LIMIT,
            projects=[project] if project else None,
        )
    )
    span = f"steps {lo if lo is not None else 'first'}–{hi if hi is not None else 'last'}"
    figure = probability_scatter(
        [(f"{run_id}", rows)], title=f"trainer vs rollout probability per token · {span}"
    )
    return figure, worst_rows(rows, limit=200)


def _step(value: Any) -> int | None:
    """A step typed into a box as a step the API takes: whole, within 0 … 2**53; else none."""
    try:
        return None if value is None else min(max(int(value), 0), 2**53)
    except (TypeError, ValueError, OverflowError):
        return None
