"""Run page: a panel per canonical metric group, live while the run is live.

The store holds each metric's points. While the run is live, the interval asks only for steps
after the last one held; zooming a panel asks the server again for the visible range at full
resolution. Figures are rebuilt from the store by pure functions.
"""

from __future__ import annotations

import logging
from typing import Any

from dash import ALL, Input, Output, State, callback_context, dcc, html, no_update

from dashboard import ids
from dashboard.figures.series import series_figure
from dashboard.figures.text import ROLLUPS_ONLY
from dashboard.pages import run_data
from dashboard.pages.run_data import MAX_POINTS, groups_for
from dashboard.query import AlertsLike, QueryLike
from dashboard.urlstate import as_float, as_int, as_list, encode
from server.domain import urls
from server.errors import NotFound

log = logging.getLogger("mismatch_monitor.dashboard")
INLINE = {"display": "inline-block", "marginLeft": "12px"}


def layout(query: QueryLike, params: dict[str, str], *, poll_ms: int = 2000, **_: Any) -> Any:
    run_id = params.get("run")
    if not run_id:
        return _message("No run selected", "Choose one on the runs page.")
    try:
        detail = query.get_run(run_id)
        metrics = query.list_metrics(run_id)
    except NotFound:
        return _message("Run not found", f"No run with id {run_id}.")
    except Exception:
        log.exception("could not load run %s", run_id)
        return _message(
            "Could not load this run", "The server failed to read it; its log has the details."
        )
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
                f"{detail.last_step} · GPUs: {', '.join(detail.gpus) or 'unknown'}"
                + (f" · {ROLLUPS_ONLY}" if detail.raw_dropped else ""),
                id=ids.RUN_SUBTITLE,
                style={"color": "#555", "marginBottom": "8px"},
            ),
            _controls(params, sorted({m.name for m in metrics})),
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


def _message(title: str, text: str) -> Any:
    return html.Div([html.H3(title), html.P(text), dcc.Link("back to runs", href=urls.RUNS)])


def _radio(component_id: str, options: list[tuple[str, str]], value: str) -> Any:
    return dcc.RadioItems(
        id=component_id,
        options=[{"label": label, "value": v} for label, v in options],
        value=value,
        inline=True,
        style=INLINE,
    )


def _controls(params: dict[str, str], names: list[str]) -> Any:
    return html.Div(
        [
            html.Span("more metrics "),
            dcc.Dropdown(
                id=ids.RUN_METRICS,
                options=[{"label": n, "value": n} for n in names],
                value=as_list(params.get("metric")),
                multi=True,
                style={"width": "420px", "display": "inline-block", "verticalAlign": "middle"},
            ),
            html.Span("  smoothing ", style={"marginLeft": "12px"}),
            _radio(
                ids.RUN_SMOOTHING,
                [("none", "none"), ("EMA", "ema"), ("running mean", "mean")],
                params.get("smooth", "none"),
            ),
            dcc.Input(
                id=ids.RUN_SMOOTH_WEIGHT,
                type="number",
                min=0,
                step=0.05,
                value=as_float(params.get("w"), 0.6),
                style={"width": "70px", "marginLeft": "6px"},
            ),
            _radio(
                ids.RUN_YSCALE,
                [("auto y", "auto"), ("log y", "log"), ("linear y", "linear")],
                params.get("y", "auto"),
            ),
            _radio(
                ids.RUN_XAXIS,
                [("x: step", "step"), ("x: wall time", "time")],
                params.get("x", "step"),
            ),
            html.Button("series CSV", id=ids.RUN_CSV_BUTTON, style={"marginLeft": "12px"}),
            dcc.Download(id=ids.RUN_CSV),
        ]
    )


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
        return load_store(query, callback_context.triggered_id, extra or [], relayouts, store)

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
        return panels(
            query,
            alerts,
            store,
            extra or [],
            smoothing=smoothing,
            weight=weight,
            yscale=yscale,
            x_axis=x_axis,
        )

    app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUN_METRICS, "value"),
        Input(ids.RUN_SMOOTHING, "value"),
        Input(ids.RUN_SMOOTH_WEIGHT, "value"),
        Input(ids.RUN_YSCALE, "value"),
        Input(ids.RUN_XAXIS, "value"),
        Input(ids.RUN_STORE, "data"),
        prevent_initial_call=True,
    )(sync_url)
    app.callback(
        Output(ids.RUN_CSV, "data"),
        Input(ids.RUN_CSV_BUTTON, "n_clicks"),
        State(ids.RUN_STORE, "data"),
        prevent_initial_call=True,
    )(download)


def load_store(
    query: QueryLike, trigger: Any, extra: list[str], relayouts: list[Any], store: dict[str, Any]
) -> Any:
    """The store after a live tick (new steps appended), a zoom (the visible range at full
    resolution) or a change of metrics (everything again)."""
    run_id = store["run"]
    held = store.get("data") or {}
    if trigger == ids.RUN_INTERVAL:
        if not held or store.get("step_max") is not None:
            return no_update  # zoomed in, or nothing drawn yet: leave the view alone
        data = run_data.append_new(query, run_id, list(held), held)
        return no_update if data is None else {**store, "data": data}
    available = {m.name for m in query.list_metrics(run_id)}
    wanted = [m for _, metrics, _ in groups_for(available, extra) for m in metrics]
    step_min, step_max = store.get("step_min"), store.get("step_max")
    max_points = MAX_POINTS
    if isinstance(trigger, dict) and trigger.get("type") == ids.PANEL:
        zoom = run_data.zoom_range(next((r for r in relayouts if r), {}))
        if zoom is None:
            return no_update
        step_min, step_max, max_points = zoom
    data = run_data.fetch(query, run_id, wanted, step_min, step_max, max_points)
    return {**store, "data": data, "step_min": step_min, "step_max": step_max}


def panels(
    query: QueryLike,
    alerts: AlertsLike | None,
    store: dict[str, Any],
    extra: list[str],
    *,
    smoothing: str,
    weight: float | None,
    yscale: str,
    x_axis: str,
) -> list[Any]:
    """One chart per panel the store holds data for."""
    data, run_id = store.get("data") or {}, store["run"]
    notes = run_data.annotation_rows(query, run_id)
    marks = run_data.alert_marks(alerts, run_id)
    return [
        _panel(
            run_id,
            name,
            series_figure(
                [(m, data.get(m, [])) for m in metrics],
                title=name,
                log_y=log_default if yscale == "auto" else yscale == "log",
                x_axis=x_axis,
                smoothing=smoothing or "none",
                weight=float(weight if weight is not None else 0.6),
                annotations=notes,
                alerts=marks,
            ),
        )
        for name, metrics, log_default in groups_for(set(data), extra)
    ]


def sync_url(
    extra: list[str] | None,
    smoothing: str,
    weight: float | None,
    yscale: str,
    x_axis: str,
    store: dict[str, Any],
) -> str:
    """The view in the URL, so a pasted link opens the same view."""
    view = {"run": store["run"], "metric": extra or [], "smooth": smoothing, "w": weight}
    zoom = {"step_min": store.get("step_min"), "step_max": store.get("step_max")}
    return encode({**view, "y": yscale, "x": x_axis, **zoom})


def download(_: Any, store: dict[str, Any]) -> dict[str, str]:
    content = run_data.series_csv(store.get("data") or {})
    return {"content": content, "filename": f"{store['run']}-series.csv"}


def _panel(run_id: str, name: str, figure: Any) -> Any:
    return dcc.Graph(
        id={"type": ids.PANEL, "index": name},
        figure=figure,
        config={
            "toImageButtonOptions": {"format": "png", "filename": f"{run_id}-{name}"},
            "displaylogo": False,
        },
        style={"width": "49%", "display": "inline-block"},
    )
