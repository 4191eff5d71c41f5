"""Buckets page: where in the token-probability range the mismatch sits."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.urlstate import as_int, as_list, encode
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import BucketGroup
from server.figures.buckets import buckets_figure, heatmap_figure
from server.figures.text import safe
from server.services.reads.port import Reads


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    runs = reads.runs.list_runs(scope, limit=500)
    return html.Div(
        [
            html.H2("Token-probability buckets"),
            dcc.Dropdown(
                id=ids.BKT_RUNS,
                options=[{"label": f"{r.name} ({r.id})", "value": r.id} for r in runs],
                value=as_list(params.get("runs")),
                multi=True,
                placeholder="runs",
            ),
            html.Div(
                [
                    dcc.RadioItems(
                        id=ids.BKT_GROUP,
                        options=[
                            {"label": "per run", "value": "run"},
                            {"label": "per GPU type", "value": "gpu"},
                        ],
                        value=params.get("group", "run"),
                        inline=True,
                        style={"display": "inline-block"},
                    ),
                    html.Span("  steps from ", style={"marginLeft": "12px"}),
                    dcc.Input(
                        id=ids.BKT_STEP_MIN,
                        type="number",
                        value=as_int(params.get("step_min")),
                        min=0,
                        debounce=True,
                        style={"width": "90px"},
                    ),
                    html.Span(" to "),
                    dcc.Input(
                        id=ids.BKT_STEP_MAX,
                        type="number",
                        value=as_int(params.get("step_max")),
                        min=0,
                        debounce=True,
                        style={"width": "90px"},
                    ),
                ],
                style={"marginTop": "8px"},
            ),
            dcc.Graph(id=ids.BKT_GRAPH, config={"displaylogo": False}),
            dcc.Graph(id=ids.BKT_HEATMAP, config={"displaylogo": False}),
        ]
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.BKT_GRAPH, "figure"),
        Output(ids.BKT_HEATMAP, "figure"),
        Input(ids.BKT_RUNS, "value"),
        Input(ids.BKT_GROUP, "value"),
        Input(ids.BKT_STEP_MIN, "value"),
        Input(ids.BKT_STEP_MAX, "value"),
    )
    def draw(runs: list[str] | None, group: str, step_min: int | None, step_max: int | None) -> Any:
        runs = runs or []
        if not runs:
            choose = "Choose one or more runs above."
            return buckets_figure([], empty=choose), heatmap_figure([], empty=choose)
        if step_min is not None and step_max is not None and step_min > step_max:
            step_min, step_max = step_max, step_min
        scope = reader()
        grouped: BucketGroup = "gpu" if group == "gpu" else "run"
        rows = reads.series.buckets(
            scope, runs, step_min=step_min, step_max=step_max, group_by=grouped
        )
        cells = reads.series.bucket_steps(
            scope, runs[0], step_min=step_min, step_max=step_max, max_points=100
        )
        title = "per GPU type" if group == "gpu" else "per run"
        return (
            buckets_figure(rows, title=f"mismatch per probability bucket, {title}"),
            heatmap_figure(
                cells,
                title=f"mean k3 per bucket and step — {runs[0]}",
                empty=f"No buckets per step for {safe(runs[0])} (see above for what sends them).",
            ),
        )

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.BKT_RUNS, "value"),
        Input(ids.BKT_GROUP, "value"),
        Input(ids.BKT_STEP_MIN, "value"),
        Input(ids.BKT_STEP_MAX, "value"),
        prevent_initial_call=True,
    )
    def sync_url(
        runs: list[str] | None, group: str, step_min: int | None, step_max: int | None
    ) -> str:
        return encode(
            {"runs": runs or [], "group": group, "step_min": step_min, "step_max": step_max}
        )
