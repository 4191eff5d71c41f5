"""Run page: a panel per canonical metric group, live while the run is live.

The store holds each metric's points. While the run is live, the interval asks only for steps
after the last one held; zooming a panel asks the server again for the visible range at full
resolution. Figures are rebuilt from the store by pure functions.
"""

from __future__ import annotations

import csv
import io
import logging
from typing import Any

from dash import ALL, Input, Output, State, callback_context, dcc, html, no_update

from dashboard import ids
from dashboard.figures.series import series_figure
from dashboard.query import AlertsLike, QueryLike, dump
from dashboard.urlstate import as_float, as_int, as_list, encode
from server.domain import urls
from server.domain.metrics import LOG_SCALE, PANELS
from server.errors import NotFound

log = logging.getLogger("mismatch_monitor.dashboard")

MAX_POINTS = 1000
ZOOM_POINTS = 2000


def groups_for(available: set[str], extra: list[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """The run page's panels: (name, metrics, log axis) for every canonical panel the run has
    data for, then one panel per extra metric asked for."""
    chosen = [
        (panel.name, tuple(m for m in panel.metrics if m in available), panel.log)
        for panel in PANELS
        if any(m in available for m in panel.metrics)
    ]
    known = {m for panel in PANELS for m in panel.metrics}
    chosen += [(m, (m,), m in LOG_SCALE) for m in extra if m in available and m not in known]
    return chosen


def layout(query: QueryLike, params: dict[str, str], *, poll_ms: int = 2000, **_: Any) -> Any:
    run_id = params.get("run")
    if not run_id:
        return html.Div(
            [html.H3("No run selected"), dcc.Link("choose one on the runs page", href=urls.RUNS)]
        )
    try:
        detail = query.get_run(run_id)
        metrics = query.list_metrics(run_id)
    except NotFound:
        return html.Div(
            [
                html.H3("Run not found"),
                html.P(f"No run with id {run_id}."),
                dcc.Link("back to runs", href=urls.RUNS),
            ]
        )
    except Exception:
        log.exception("could not load run %s", run_id)
        return html.Div(
            [
                html.H3("Could not load this run"),
                html.P("The server failed to read it; the server log has the details."),
                dcc.Link("back to runs", href=urls.RUNS),
            ]
        )
    names = sorted({m.name for m in metrics})
    store = {
        "run": run_id,
        "step_min": as_int(params.get("step_min")),
        "step_max": as_int(params.get("step_max")),
    }
    return html.Div(
        [
            html.H2(detail.name, id=ids.RUN_TITLE),
            html.Div(
                f"{detail.id} · project {detail.project} · {detail.status} · last step "
                f"{detail.last_step} · GPUs: {', '.join(detail.gpus) or 'unknown'}",
                style={"color": "#555", "marginBottom": "8px"},
            ),
            html.Div(
                [
                    html.Span("more metrics "),
                    dcc.Dropdown(
                        id=ids.RUN_METRICS,
                        options=[{"label": n, "value": n} for n in names],
                        value=as_list(params.get("metric")),
                        multi=True,
                        style={
                            "width": "420px",
                            "display": "inline-block",
                            "verticalAlign": "middle",
                        },
                    ),
                    html.Span("  smoothing ", style={"marginLeft": "12px"}),
                    dcc.RadioItems(
                        id=ids.RUN_SMOOTHING,
                        options=[
                            {"label": "none", "value": "none"},
                            {"label": "EMA", "value": "ema"},
                            {"label": "running mean", "value": "mean"},
                        ],
                        value=params.get("smooth", "none"),
                        inline=True,
                        style={"display": "inline-block"},
                    ),
                    dcc.Input(
                        id=ids.RUN_SMOOTH_WEIGHT,
                        type="number",
                        min=0,
                        step=0.05,
                        value=as_float(params.get("w"), 0.6),
                        style={"width": "70px", "marginLeft": "6px"},
                    ),
                    dcc.RadioItems(
                        id=ids.RUN_YSCALE,
                        options=[
                            {"label": "auto y", "value": "auto"},
                            {"label": "log y", "value": "log"},
                            {"label": "linear y", "value": "linear"},
                        ],
                        value=params.get("y", "auto"),
                        inline=True,
                        style={"display": "inline-block", "marginLeft": "12px"},
                    ),
                    dcc.RadioItems(
                        id=ids.RUN_XAXIS,
                        options=[
                            {"label": "x: step", "value": "step"},
                            {"label": "x: wall time", "value": "time"},
                        ],
                        value=params.get("x", "step"),
                        inline=True,
                        style={"display": "inline-block", "marginLeft": "12px"},
                    ),
                    html.Button("series CSV", id=ids.RUN_CSV_BUTTON, style={"marginLeft": "12px"}),
                    dcc.Download(id=ids.RUN_CSV),
                ]
            ),
            dcc.Store(id=ids.RUN_STORE, data=store),
            dcc.Interval(
                id=ids.RUN_INTERVAL,
                interval=poll_ms,
                disabled=detail.status not in ("live", "idle"),
            ),
            html.Div(id=ids.RUN_PANELS),
            html.H4("Annotations"),
            html.Ul(
                [
                    html.Li(f"step {a.step if a.step is not None else '—'} · {a.kind} · {a.text}")
                    for a in detail.annotations[-50:]
                ],
                id=ids.RUN_ANNOTATIONS,
            ),
        ]
    )


def _fetch(
    query: QueryLike,
    run_id: str,
    metrics: list[str],
    step_min: int | None,
    step_max: int | None,
    max_points: int,
) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for metric in metrics:
        try:
            out[metric] = dump(
                query.series(
                    run_id, metric, step_min=step_min, step_max=step_max, max_points=max_points
                ).points
            )
        except Exception:
            log.exception("could not read %s of run %s", metric, run_id)
            out[metric] = []
    return out


def register(app: Any, query: QueryLike, *, alerts: AlertsLike | None = None, **_: Any) -> None:
    @app.callback(
        Output(ids.RUN_STORE, "data"),
        Input(ids.RUN_METRICS, "value"),
        Input(ids.RUN_INTERVAL, "n_intervals"),
        Input({"type": ids.PANEL, "index": ALL}, "relayoutData"),
        State(ids.RUN_STORE, "data"),
    )
    def load(
        extra: list[str] | None, _tick: Any, relayouts: list[Any], store: dict[str, Any]
    ) -> Any:
        run_id = store["run"]
        trigger = callback_context.triggered_id
        available = {m.name for m in query.list_metrics(run_id)}
        wanted = [m for _, metrics, _ in groups_for(available, extra or []) for m in metrics]
        data: dict[str, list[dict[str, Any]]] = dict(store.get("data") or {})
        if trigger == ids.RUN_INTERVAL and (not data or store.get("step_max") is not None):
            return no_update  # zoomed in, or nothing drawn yet: leave the view alone
        if trigger == ids.RUN_INTERVAL:
            # Live: only the steps after the last one held.
            for metric in wanted:
                held = data.get(metric) or []
                after = held[-1]["step_end"] + 1 if held else None
                new = _fetch(query, run_id, [metric], after, None, MAX_POINTS)[metric]
                if new:
                    data[metric] = held + new
            return {**store, "data": data}
        step_min, step_max = store.get("step_min"), store.get("step_max")
        max_points = MAX_POINTS
        if isinstance(trigger, dict) and trigger.get("type") == ids.PANEL:
            relayout = next((r for r in relayouts if r), None) or {}
            if "xaxis.range[0]" in relayout:
                step_min = max(0, int(float(relayout["xaxis.range[0]"])))
                step_max = int(float(relayout["xaxis.range[1]"])) + 1
                max_points = ZOOM_POINTS
            elif relayout.get("xaxis.autorange"):
                step_min = step_max = None
            else:
                return no_update
        fetched = _fetch(query, run_id, wanted, step_min, step_max, max_points)
        return {**store, "data": fetched, "step_min": step_min, "step_max": step_max}

    @app.callback(
        Output(ids.RUN_PANELS, "children"),
        Input(ids.RUN_STORE, "data"),
        Input(ids.RUN_SMOOTHING, "value"),
        Input(ids.RUN_SMOOTH_WEIGHT, "value"),
        Input(ids.RUN_YSCALE, "value"),
        Input(ids.RUN_XAXIS, "value"),
        State(ids.RUN_METRICS, "value"),
    )
    def draw(
        store: dict[str, Any],
        smoothing: str,
        weight: float | None,
        yscale: str,
        x_axis: str,
        extra: list[str] | None,
    ) -> Any:
        data = store.get("data") or {}
        run_id = store["run"]
        try:
            notes = [dump(a) for a in query.get_run(run_id).annotations]
        except Exception:
            log.exception("could not read the annotations of run %s", run_id)
            notes = []
        marks = _alerts_for(alerts, run_id)
        panels = []
        for name, metrics, log_default in groups_for(set(data), extra or []):
            log_y = log_default if yscale == "auto" else yscale == "log"
            fig = series_figure(
                [(m, data.get(m, [])) for m in metrics],
                title=name,
                log_y=log_y,
                x_axis=x_axis,
                smoothing=smoothing or "none",
                weight=float(weight if weight is not None else 0.6),
                annotations=notes,
                alerts=marks,
            )
            panels.append(
                dcc.Graph(
                    id={"type": ids.PANEL, "index": name},
                    figure=fig,
                    config={
                        "toImageButtonOptions": {"format": "png", "filename": f"{run_id}-{name}"},
                        "displaylogo": False,
                    },
                    style={"width": "49%", "display": "inline-block"},
                )
            )
        return panels

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUN_METRICS, "value"),
        Input(ids.RUN_SMOOTHING, "value"),
        Input(ids.RUN_SMOOTH_WEIGHT, "value"),
        Input(ids.RUN_YSCALE, "value"),
        Input(ids.RUN_XAXIS, "value"),
        Input(ids.RUN_STORE, "data"),
        prevent_initial_call=True,
    )
    def sync_url(
        extra: list[str] | None,
        smoothing: str,
        weight: float | None,
        yscale: str,
        x_axis: str,
        store: dict[str, Any],
    ) -> str:
        return encode(
            {
                "run": store["run"],
                "metric": extra or [],
                "smooth": smoothing,
                "w": weight,
                "y": yscale,
                "x": x_axis,
                "step_min": store.get("step_min"),
                "step_max": store.get("step_max"),
            }
        )

    @app.callback(
        Output(ids.RUN_CSV, "data"),
        Input(ids.RUN_CSV_BUTTON, "n_clicks"),
        State(ids.RUN_STORE, "data"),
        prevent_initial_call=True,
    )
    def download(_: Any, store: dict[str, Any]) -> Any:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(
            [
                "metric",
                "step",
                "step_end",
                "time",
                "min",
                "max",
                "mean",
                "last",
                "count",
                "nan",
                "pos_inf",
                "neg_inf",
            ]
        )
        for metric, points in sorted((store.get("data") or {}).items()):
            for p in points:
                writer.writerow(
                    [
                        metric,
                        p["step"],
                        p["step_end"],
                        p.get("time"),
                        p.get("min"),
                        p.get("max"),
                        p.get("mean"),
                        p.get("last"),
                        p["count"],
                        p.get("nan", 0),
                        p.get("pos_inf", 0),
                        p.get("neg_inf", 0),
                    ]
                )
        return {"content": buffer.getvalue(), "filename": f"{store['run']}-series.csv"}


def _alerts_for(alerts: AlertsLike | None, run_id: str) -> list[dict[str, Any]]:
    if alerts is None:
        return []
    try:
        found = alerts.markers(run_id)
    except Exception:
        log.exception("could not read the alerts of run %s", run_id)
        return []
    return [{"step": a.step, "rule": a.rule_name, "state": a.state} for a in found]
