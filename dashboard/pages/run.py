"""Run page: the run's mismatch signal first, then a panel per canonical metric group, live
while the run is live.

The first chart draws the run's strongest mismatch signal whatever its trainer calls it (k3,
TRL's mean |logp diff|, OpenRLHF's k1, slime's sequence means), titled with its name and
meaning (`server.domain.metrics.run_panels`); every metric the run logs, under any name, is in
the "more metrics" menu.

The browser holds the figures and a small view (run, zoom range), never the data: nothing large
travels back up. While the run is live, a tick asks for the run's last step (one lookup) and,
only when it moved past the last step it told of before (the layout's at first), tells the
redraw, which reads the view again — at most MAX_POINTS buckets per panel, however long the run.
The tick reads only what comes before it (the page as opened, the zoom asked for, its own last
answer), never what a redraw wrote: the live path runs one way. Ticks never overlap: the
interval fires once and each tick re-arms it when done. A zoom reads the visible range at full
resolution; smoothing, scale and axis changes redraw from a fresh read; the CSV export reads the
view at full precision when asked. A redraw is one read of the read port (`run_view`): the last
step, the panels' series, the annotations, GPU segments and alerts come back together.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from dash import ALL, Input, Output, State, dcc, html, no_update

from dashboard import ids
from dashboard.access import Reader
from dashboard.pages import (
    run_alerts,
    run_attribution,
    run_data,
    run_exemplars,
    run_export,
    run_lines,
)
from dashboard.urlstate import as_float, as_int, as_list, encode
from server.domain import urls
from server.domain.metrics import MISMATCH_PANEL
from server.domain.reads.run_view import RunView
from server.domain.reads.scope import ReadScope
from server.errors import Conflict, NotFound
from server.figures.empty import no_signal_figure
from server.figures.points import points
from server.figures.series import series_figure
from server.services.reads.port import Reads

log = logging.getLogger("mismatch_monitor.dashboard")
INLINE = {"display": "inline-block", "marginLeft": "12px"}
MUTED = {"color": "#555", "marginBottom": "8px"}
WARN = {"color": "#8a4b00", "marginBottom": "8px"}


def layout(
    reads: Reads, reader: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000
) -> Any:
    run_id = params.get("run")
    if not run_id:
        return _message("No run selected", "Choose one on the runs page.")
    project = params.get("project") or None
    scope = reader.narrowed(project)
    try:
        detail = reads.runs.get_run(scope, run_id)
        metrics = reads.runs.list_metrics(scope, run_id)
    except NotFound:
        return _message("Run not found", f"No run with id {run_id}.")
    except Conflict as exc:  # projects the reader sees share this id: let them choose
        return _choose_project(run_id, exc)
    except Exception:
        log.exception("could not load run %s", run_id)
        return _message(
            "Could not load this run", "The server failed to read it; its log has the details."
        )
    view = run_data.View(
        run_id,
        as_int(params.get("step_min")),
        as_int(params.get("step_max")),
        project=detail.project if project else None,
    )
    return html.Div(
        [
            html.H2(detail.name, id=ids.RUN_TITLE),
            html.Div(
                run_lines.subtitle(detail),
                id=ids.RUN_SUBTITLE,
                style={"color": "#555", "marginBottom": "8px"},
            ),
            html.Div(run_lines.metric_map_line(detail.config), id=ids.RUN_METRIC_MAP, style=MUTED),
            html.Div(
                run_lines.sampler_only_line(detail.labels), id=ids.RUN_SAMPLER_ONLY, style=WARN
            ),
            _controls(params, sorted({m.name for m in metrics}), view),
            dcc.Store(id=ids.RUN_PAGE, data=view.as_dict()),
            dcc.Store(id=ids.RUN_VIEW, data=view.as_dict()),
            dcc.Store(id=ids.RUN_ZOOM, data=run_data.zoom_of(view)),
            dcc.Store(id=ids.RUN_LAST, data=detail.last_step),
            dcc.Interval(
                id=ids.RUN_INTERVAL,
                interval=poll_ms,
                max_intervals=1,  # one-shot: each tick re-arms it when done
                disabled=detail.status not in ("live", "idle"),
            ),
            html.Div(id=ids.RUN_PANELS),
            run_alerts.section(reads, scope, run_id),
            run_attribution.section(
                reads, scope, run_id, step_min=view.step_min, step_max=view.step_max
            ),
            run_exemplars.section(
                reads,
                scope,
                run_id,
                project=project,
                step_min=view.step_min,
                step_max=view.step_max,
            ),
            html.H4("Annotations"),
            html.Ul([html.Li(line) for line in run_lines.notes(detail)], id=ids.RUN_ANNOTATIONS),
        ]
    )


def _choose_project(run_id: str, error: Conflict) -> Any:
    """Projects the reader sees share this run id: a link to the run of each."""
    detail = error.detail if isinstance(error.detail, dict) else {}
    links = [
        html.Li(dcc.Link(f"{run_id} in project {p}", href=urls.run_view(run_id, project=p)))
        for p in detail.get("projects", [])
    ]
    return html.Div([html.H3("Which run?"), html.P(error.message), html.Ul(links)])


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


def _controls(params: dict[str, str], names: list[str], view: run_data.View) -> Any:
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
            run_export.link(view),
        ]
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    run_exemplars.register(app, reads, reader)
    run_export.register(app)
    # Zooms are filtered in the browser: a panel's resizes fire relayouts too, and a server
    # call for one would supersede (and so lose) the call for the zoom before it.
    app.clientside_callback(
        run_data.ZOOM_JS,
        Output(ids.RUN_ZOOM, "data"),
        Input({"type": ids.PANEL, "index": ALL}, "relayoutData"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.RUN_LAST, "data"),
        Output(ids.RUN_INTERVAL, "n_intervals"),
        Input(ids.RUN_INTERVAL, "n_intervals"),
        State(ids.RUN_PAGE, "data"),
        State(ids.RUN_ZOOM, "data"),
        State(ids.RUN_LAST, "data"),
        prevent_initial_call=True,
    )
    def _tick(
        _: int | None, page: run_data.ViewData, zoom: dict[str, int | None], told: int | None
    ) -> tuple[Any, int]:
        opened = run_data.View.from_dict(page)
        return tick(reads, reader(), opened, zoom, told), 0  # 0 re-arms the timer

    @app.callback(
        Output(ids.RUN_PANELS, "children"),
        Output(ids.RUN_VIEW, "data"),
        Input(ids.RUN_METRICS, "value"),
        Input(ids.RUN_ZOOM, "data"),
        Input(ids.RUN_LAST, "data"),
        Input(ids.RUN_SMOOTHING, "value"),
        Input(ids.RUN_SMOOTH_WEIGHT, "value"),
        Input(ids.RUN_YSCALE, "value"),
        Input(ids.RUN_XAXIS, "value"),
        State(ids.RUN_VIEW, "data"),
    )
    def _draw(
        extra: list[str] | None,
        zoom: dict[str, int | None],
        _last: int | None,
        smoothing: str,
        weight: float | None,
        yscale: str,
        x_axis: str,
        view: run_data.ViewData,
    ) -> tuple[list[Any], run_data.ViewData]:
        style = Style(smoothing or "none", weight, yscale, x_axis)
        return draw(reads, reader(), extra or [], zoom, style, run_data.View.from_dict(view))

    app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUN_METRICS, "value"),
        Input(ids.RUN_SMOOTHING, "value"),
        Input(ids.RUN_SMOOTH_WEIGHT, "value"),
        Input(ids.RUN_YSCALE, "value"),
        Input(ids.RUN_XAXIS, "value"),
        Input(ids.RUN_VIEW, "data"),
        prevent_initial_call=True,
    )(sync_url)

    @app.callback(
        Output(ids.RUN_CSV, "data"),
        Input(ids.RUN_CSV_BUTTON, "n_clicks"),
        State(ids.RUN_METRICS, "value"),
        State(ids.RUN_VIEW, "data"),
        prevent_initial_call=True,
    )
    def _download(
        _: int | None, extra: list[str] | None, view: run_data.ViewData
    ) -> dict[str, str]:
        return download(reads, reader(), extra or [], view)


@dataclass(frozen=True)
class Style:
    """How the panels draw (the controls beside them)."""

    smoothing: str
    weight: float | None
    yscale: str
    x_axis: str


def tick(
    reads: Reads,
    reader: ReadScope,
    page: run_data.View,
    zoom: dict[str, int | None],
    told: int | None,
) -> Any:
    """The run's last step when it moved past `told`, the last one told of (then the panels
    redraw); nothing while zoomed in (a range that ends), while nothing is new, or once the
    reader cannot see the run (deleted, or access withdrawn, while the page was open)."""
    if zoom.get("step_max") is not None:
        return no_update
    try:
        last = reads.runs.last_step(page.scope(reader), page.run)
    except NotFound:
        return no_update
    if last is None or (told is not None and last <= told):
        return no_update
    return last


def draw(
    reads: Reads,
    reader: ReadScope,
    extra: list[str],
    zoom: dict[str, int | None],
    style: Style,
    view: run_data.View,
) -> tuple[list[Any], run_data.ViewData]:
    """(panels, view): the range zoomed to (all of the run when not zoomed), read afresh in
    one call."""
    view = replace(
        view,
        step_min=zoom.get("step_min"),
        step_max=zoom.get("step_max"),
        max_points=int(zoom.get("max_points") or run_data.MAX_POINTS),
    )
    found = run_data.fetch(reads, reader, view, extra)
    if found is None:
        return [], view.as_dict()
    return panels(found, style), view.as_dict()


def panels(found: RunView, style: Style) -> list[Any]:
    """One chart per panel of the metrics the run logs (and the extra ones asked for); a run
    that logs no mismatch signal gets, in the first chart's place, what is missing and how to
    log it (never blank axes)."""
    notes = run_data.notes(found.annotations, found.gpu_segments)
    segments = run_data.switched_segments(found.gpu_segments)
    marks = run_data.alert_marks(found)
    signal = any(p.name == MISMATCH_PANEL for p in found.panels)
    missing = [] if signal else [_panel(found.run_id, MISMATCH_PANEL, no_signal_figure())]
    return missing + [
        _panel(
            found.run_id,
            panel.name,
            series_figure(
                [(m, points(found.series.get(m))) for m in panel.metrics],
                title=panel.title or panel.name,
                subtitle=panel.subtitle,
                log_y=panel.log if style.yscale == "auto" else style.yscale == "log",
                x_axis=style.x_axis,
                smoothing=style.smoothing,
                weight=float(style.weight if style.weight is not None else 0.6),
                annotations=notes,
                alerts=marks,
                segments=segments,
            ),
        )
        for panel in found.panels
    ]


def sync_url(
    extra: list[str] | None,
    smoothing: str,
    weight: float | None,
    yscale: str,
    x_axis: str,
    view: run_data.ViewData,
) -> str:
    """The view in the URL, so a pasted link opens the same view."""
    shown = {
        "run": view["run"],
        "project": view.get("project"),
        "metric": extra or [],
        "smooth": smoothing,
        "w": weight,
    }
    zoom = {"step_min": view.get("step_min"), "step_max": view.get("step_max")}
    return encode({**shown, "y": yscale, "x": x_axis, **zoom})


def download(
    reads: Reads, reader: ReadScope, extra: list[str], view_data: run_data.ViewData
) -> dict[str, str]:
    """The drawn view's buckets at full precision, read when asked."""
    view = run_data.View.from_dict(view_data)
    found = run_data.fetch(reads, reader, view, extra)
    content = run_data.series_csv(found) if found is not None else ""
    return {"content": content, "filename": f"{view.run}-series.csv"}


def _panel(run_id: str, name: str, figure: dict[str, Any]) -> Any:
    return dcc.Graph(
        id={"type": ids.PANEL, "index": name},
        figure=figure,
        config={
            "toImageButtonOptions": {"format": "png", "filename": f"{run_id}-{name}"},
            "displaylogo": False,
        },
        style={"width": "49%", "display": "inline-block"},
    )
