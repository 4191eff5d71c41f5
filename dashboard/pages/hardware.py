"""Hardware page: the mismatch distribution per GPU type, and how many steps stand behind it."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html

from dashboard import ids
from dashboard.components import DataTable
from dashboard.figures.buckets import buckets_figure
from dashboard.figures.hardware import hardware_figure
from dashboard.query import QueryLike, dump
from dashboard.urlstate import as_list, encode


def layout(query: QueryLike, params: dict[str, str], **_: Any) -> Any:
    projects = query.projects()
    return html.Div(
        [
            html.H2("Hardware"),
            dcc.Dropdown(
                id=ids.HW_PROJECT,
                options=[{"label": p, "value": p} for p in projects],
                value=params.get("project") or (projects[0] if projects else None),
                placeholder="project",
                style={"width": "300px"},
            ),
            dcc.Store(id="hardware-runs", data=as_list(params.get("runs"))),
            dcc.Graph(id=ids.HW_GRAPH, config={"displaylogo": False}),
            DataTable(
                id=ids.HW_TABLE,
                columns=[
                    {"name": n, "id": n}
                    for n in ("gpu", "runs", "actors", "steps", "nonfinite", "median", "p95")
                ],
                data=[],
                style_cell={"fontFamily": "sans-serif", "fontSize": "13px", "textAlign": "left"},
            ),
            dcc.Graph(id=ids.HW_BUCKETS, config={"displaylogo": False}),
        ]
    )


def register(app: Any, query: QueryLike, **_: Any) -> None:
    @app.callback(
        Output(ids.HW_GRAPH, "figure"),
        Output(ids.HW_TABLE, "data"),
        Output(ids.HW_BUCKETS, "figure"),
        Input(ids.HW_PROJECT, "value"),
        Input("hardware-runs", "data"),
    )
    def draw(project: str | None, runs: list[str] | None) -> Any:
        run_ids = runs or [r.id for r in query.list_runs(project=project, limit=2000)]
        rows = (
            dump(query.hardware(metric="k3_kl", run_ids=run_ids or None, project=project))
            if run_ids
            else []
        )
        table = [
            {
                k: (f"{row[k]:.3g}" if isinstance(row[k], float) else row[k])
                for k in ("gpu", "runs", "actors", "steps", "nonfinite", "median", "p95")
            }
            for row in rows
        ]
        bucket_rows = dump(query.buckets(run_ids, group_by="gpu")) if run_ids else []
        return (
            hardware_figure(rows),
            table,
            buckets_figure(bucket_rows, title="buckets per GPU type"),
        )

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.HW_PROJECT, "value"),
        prevent_initial_call=True,
    )
    def sync_url(project: str | None) -> str:
        return encode({"project": project})
