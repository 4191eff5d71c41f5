"""Runs page: every run with its status, last step and latest vllm-kl; select to compare."""

from __future__ import annotations

import logging
import math
from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.components import DataTable
from dashboard.figures.text import sparkline
from dashboard.query import AlertsLike, QueryLike
from dashboard.urlstate import encode
from server.domain import urls
from server.domain.metrics import HEADLINE
from server.domain.series import bucket_value

log = logging.getLogger("mismatch_monitor.dashboard")

COLUMNS = [
    ("name", "run"),
    ("project", "project"),
    ("labels", "labels"),
    ("status", "status"),
    ("last_step", "last step"),
    ("k3_kl", "vllm-kl (k3)"),
    ("trend", "k3 trend"),
    ("gpus", "GPU types"),
    ("alarms", "firing alarms"),
]


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3g}"


def table_rows(
    query: QueryLike, runs: list[Any], alerts: AlertsLike | None = None
) -> list[dict[str, Any]]:
    rows = []
    firing = _firing_counts(alerts)
    for r in runs:
        trend = ""
        try:
            series = query.series(r.id, HEADLINE, max_points=30)
            trend = sparkline([bucket_value(p.model_dump()) for p in series.points])
        except Exception:
            log.exception("could not read the trend of run %s", r.id)
        rows.append(
            {
                "id": r.id,
                "name": r.name,
                "project": r.project,
                "labels": ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items())),
                "status": r.status,
                "last_step": r.last_step,
                "k3_kl": _fmt(r.latest.get(HEADLINE)),
                "trend": trend,
                "gpus": ", ".join(r.gpus),
                "alarms": firing.get(r.id, 0),
            }
        )
    return rows


def _firing_counts(alerts: AlertsLike | None) -> dict[str, int]:
    if alerts is None:
        return {}
    try:
        return alerts.firing_counts()
    except Exception:
        log.exception("could not count firing alerts")
        return {}


def layout(query: QueryLike, params: dict[str, str], **_: Any) -> Any:
    projects = query.projects()
    return html.Div(
        [
            html.H2("Runs"),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.RUNS_FILTER_PROJECT,
                        options=[{"label": p, "value": p} for p in projects],
                        value=params.get("project"),
                        placeholder="all projects",
                        style={
                            "width": "220px",
                            "display": "inline-block",
                            "verticalAlign": "middle",
                        },
                    ),
                    dcc.Input(
                        id=ids.RUNS_FILTER_LABEL,
                        value=params.get("label", ""),
                        placeholder="label k=v",
                        debounce=True,
                        style={"marginLeft": "8px"},
                    ),
                    dcc.Input(
                        id=ids.RUNS_FILTER_TEXT,
                        value=params.get("text", ""),
                        placeholder="search name",
                        debounce=True,
                        style={"marginLeft": "8px"},
                    ),
                    dcc.Link(
                        "Compare selected",
                        id=ids.RUNS_COMPARE_LINK,
                        href=urls.COMPARE,
                        style={"marginLeft": "16px"},
                    ),
                ]
            ),
            DataTable(
                id=ids.RUNS_TABLE,
                columns=[{"name": label, "id": key} for key, label in COLUMNS],
                data=[],
                row_selectable="multi",
                selected_rows=[],
                sort_action="native",
                page_size=50,
                style_cell={
                    "fontFamily": "sans-serif",
                    "fontSize": "13px",
                    "textAlign": "left",
                    "maxWidth": "280px",
                    "overflow": "hidden",
                    "textOverflow": "ellipsis",
                },
                style_data_conditional=[
                    {
                        "if": {"filter_query": "{status} = live"},
                        "color": "#009E73",
                        "fontWeight": "bold",
                    },
                    {
                        "if": {"filter_query": "{alarms} > 0", "column_id": "alarms"},
                        "color": "#D55E00",
                        "fontWeight": "bold",
                    },
                ],
            ),
            html.Div(id="runs-open-links", style={"marginTop": "8px"}),
            dcc.Interval(id=ids.RUNS_REFRESH, interval=5000),
        ]
    )


def register(app: Any, query: QueryLike, *, alerts: AlertsLike | None = None, **_: Any) -> None:
    @app.callback(
        Output(ids.RUNS_TABLE, "data"),
        Input(ids.RUNS_FILTER_PROJECT, "value"),
        Input(ids.RUNS_FILTER_LABEL, "value"),
        Input(ids.RUNS_FILTER_TEXT, "value"),
        Input(ids.RUNS_REFRESH, "n_intervals"),
    )
    def load(
        project: str | None, label: str | None, text: str | None, _: Any
    ) -> list[dict[str, Any]]:
        try:
            found = query.list_runs(project=project or None, label=label or None, text=text or None)
        except Exception:
            log.exception("could not list runs")
            found = []
        return table_rows(query, found, alerts)

    @app.callback(
        Output(ids.RUNS_COMPARE_LINK, "href"),
        Output("runs-open-links", "children"),
        Input(ids.RUNS_TABLE, "selected_rows"),
        State(ids.RUNS_TABLE, "data"),
    )
    def selection(selected: list[int] | None, data: list[dict[str, Any]] | None) -> Any:
        chosen = [data[i]["id"] for i in (selected or []) if data and i < len(data)]
        href = urls.compare_view(chosen)
        links = [
            dcc.Link(
                f"open {row_id}",
                href=urls.run_view(row_id),
                style={"marginRight": "12px"},
            )
            for row_id in chosen
        ]
        return href, links

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUNS_FILTER_PROJECT, "value"),
        Input(ids.RUNS_FILTER_LABEL, "value"),
        Input(ids.RUNS_FILTER_TEXT, "value"),
        prevent_initial_call=True,
    )
    def sync_url(project: str | None, label: str | None, text: str | None) -> str:
        return encode({"project": project, "label": label, "text": text})
