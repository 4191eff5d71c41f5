"""Compare page: runs overlaid against a reference, where each leaves it, and why (config diff).

It opens on the strongest mismatch signal the chosen runs all log (`metrics.compare_metric`),
whatever their trainers call it; the metric menu lists every metric any of them logs, under
the names they log it. A run without the metric reads "no data" in the divergence table (never
"never"), and runs that share no mismatch signal are told so in words.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.alignment import (
    DEFAULT_COUNTER,
    parse_align,
)
from dashboard.components import DataTable
from dashboard.pages import compare_aligned, compare_metrics
from dashboard.pages.compare_data import divergences, fetch, read_through
from dashboard.urlstate import as_float, as_int, as_list, encode
from server.domain import signal_views, signals, urls
from server.domain.metrics import LOG_SCALE
from server.domain.parity import diff
from server.domain.reads.scope import ReadScope
from server.figures.series import difference_figure, series_figure, zoomed
from server.figures.text import named, rollups_note
from server.services.reads.port import Reads

POINTS = 2000


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    runs = reads.runs.list_runs(scope, limit=500)
    options = [{"label": f"{r.name} ({r.id})", "value": r.id} for r in runs]
    chosen = as_list(params.get("runs"))
    window = {
        "step_min": as_int(params.get("step_min")),
        "step_max": as_int(params.get("step_max")),
    }
    return html.Div(
        [
            html.H2("Compare"),
            dcc.Link(  # kept current by the hardware page's `link_from_compare`
                "hardware view of these runs",
                id=ids.CMP_HARDWARE_LINK,
                href=urls.hardware_view(runs=chosen),
            ),
            dcc.Store(id=ids.CMP_WINDOW, data=window),
            dcc.Dropdown(
                id=ids.CMP_RUNS,
                options=options,
                value=chosen,
                multi=True,
                placeholder="runs to compare",
                style={"minWidth": "420px"},
            ),
            _view_controls(params, options, chosen, compare_metrics.logged(reads, scope, chosen)),
            html.P(id=ids.CMP_SIGNAL_NOTE, style={"color": "#555", "margin": "4px 0"}),
            compare_aligned.controls(params),
            _band_controls(params),
            dcc.Graph(id=ids.CMP_GRAPH, config={"displaylogo": False}),
            html.H4("First divergence from the reference"),
            DataTable(
                id=ids.CMP_DIVERGENCE,
                columns=[
                    {"name": "run", "id": "run"},
                    {"name": "first divergence step", "id": "step"},
                ],
                data=[],
                style_cell={"fontFamily": "sans-serif", "fontSize": "13px", "textAlign": "left"},
            ),
            html.H4("Config differences (parity-relevant first)"),
            html.Div(id=ids.CMP_CONFIG_DIFF),
        ]
    )


INLINE_DROPDOWN = {"display": "inline-block", "verticalAlign": "middle"}


def _view_controls(
    params: dict[str, str],
    options: list[dict[str, str]],
    chosen: list[str],
    logged: dict[str, set[str]],
) -> Any:
    metrics, metric = compare_metrics.menu(logged, params.get("metric"))
    return html.Div(
        [
            html.Span("reference "),
            dcc.Dropdown(
                id=ids.CMP_REFERENCE,
                options=[o for o in options if o["value"] in chosen],
                value=params.get("ref") or (chosen[0] if chosen else None),
                clearable=False,
                style={"width": "300px", **INLINE_DROPDOWN},
            ),
            html.Span(" metric ", style={"marginLeft": "12px"}),
            dcc.Dropdown(
                id=ids.CMP_METRIC,
                options=metrics,
                value=metric,
                clearable=False,
                style={"width": "320px", **INLINE_DROPDOWN},
            ),
            dcc.RadioItems(
                id=ids.CMP_MODE,
                options=[
                    {"label": "overlay", "value": "overlay"},
                    {"label": "difference to reference", "value": "diff"},
                ],
                value=params.get("mode", "overlay"),
                inline=True,
                style={"display": "inline-block", "marginLeft": "12px"},
            ),
        ],
        style={"marginTop": "8px"},
    )


def _band_controls(params: dict[str, str]) -> Any:
    return html.Div(
        [
            html.Span("band: reference rolling mean ± k × rolling std (20 steps); k = "),
            dcc.Input(
                id=ids.CMP_BAND_K,
                type="number",
                value=as_float(params.get("k"), 3.0),
                min=0.5,
                step=0.5,
                style={"width": "60px"},
            ),
            html.Span(" ; diverged when outside for N steps, N = "),
            dcc.Input(
                id=ids.CMP_BAND_N,
                type="number",
                value=as_int(params.get("n")) or 5,
                min=1,
                step=1,
                style={"width": "60px"},
            ),
        ],
        style={"marginTop": "8px"},
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.CMP_REFERENCE, "options"),
        Output(ids.CMP_REFERENCE, "value"),
        Input(ids.CMP_RUNS, "value"),
        State(ids.CMP_REFERENCE, "value"),
        prevent_initial_call=True,  # the layout sets both from the URL: draw at once
    )
    def references(chosen: list[str] | None, current: str | None) -> Any:
        chosen = chosen or []
        value = current if current in chosen else (chosen[0] if chosen else None)
        return [{"label": r, "value": r} for r in chosen], value

    compare_metrics.register(app, reads, reader)

    @app.callback(
        Output(ids.CMP_GRAPH, "figure"),
        Output(ids.CMP_DIVERGENCE, "data"),
        Output(ids.CMP_CONFIG_DIFF, "children"),
        Output(ids.CMP_SIGNAL_NOTE, "children"),
        Input(ids.CMP_RUNS, "value"),
        Input(ids.CMP_REFERENCE, "value"),
        Input(ids.CMP_METRIC, "value"),
        Input(ids.CMP_MODE, "value"),
        Input(ids.CMP_BAND_K, "value"),
        Input(ids.CMP_BAND_N, "value"),
        Input(ids.CMP_ALIGN, "value"),
        Input(ids.CMP_COUNTER, "value"),
        State(ids.CMP_WINDOW, "data"),
    )
    def draw(*inputs: Any) -> Any:
        return drawn(reads, reader(), *inputs)

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.CMP_RUNS, "value"),
        Input(ids.CMP_REFERENCE, "value"),
        Input(ids.CMP_METRIC, "value"),
        Input(ids.CMP_MODE, "value"),
        Input(ids.CMP_BAND_K, "value"),
        Input(ids.CMP_BAND_N, "value"),
        Input(ids.CMP_ALIGN, "value"),
        Input(ids.CMP_COUNTER, "value"),
        State(ids.CMP_WINDOW, "data"),
        prevent_initial_call=True,
    )
    def sync_url(
        chosen: list[str] | None,
        ref: str | None,
        metric: str,
        mode: str,
        k: float | None,
        n: int | None,
        align: str | None,
        counter: str | None,
        window: dict[str, int | None] | None,
    ) -> str:
        state = {"runs": chosen or [], "ref": ref, "metric": metric, "mode": mode, "k": k, "n": n}
        return encode({**state, **compare_aligned.link(align, counter), **(window or {})})


def drawn(
    reads: Reads,
    scope: ReadScope,
    chosen: list[str] | None,
    ref: str | None,
    metric: str | None,
    mode: str,
    k: float | None,
    n: int | None,
    align: str | None,
    counter: str | None,
    window: dict[str, int | None] | None,
) -> Any:
    """The figure, divergence rows, config diff and the note on the metric, for the inputs."""
    chosen = chosen or []
    logged = compare_metrics.logged(reads, scope, chosen)
    settings = (mode, float(k or 3.0), int(n or 5), window or {})
    counter = (counter or "").strip() or DEFAULT_COUNTER
    found = view(
        reads,
        scope,
        chosen,
        ref,
        metric or "",
        *settings,
        align=parse_align(align),
        counter=counter,
        logged=logged,
    )
    names = {c.id: c.name for c in reads.runs.run_configs(scope, list(logged))}
    return (*found, compare_metrics.note(metric, logged, names))


def view(
    reads: Reads,
    scope: ReadScope,
    chosen: list[str],
    ref: str | None,
    metric: str,
    mode: str,
    k: float,
    n: int,
    window: dict[str, int | None] | None = None,
    *,
    align: str = "step",
    counter: str = DEFAULT_COUNTER,
    logged: dict[str, set[str]] | None = None,
) -> tuple[Any, list[dict[str, Any]], Any]:
    """The figure, the first-divergence rows and the config diff for the chosen runs, over the
    steps of `window` (`step_min`, `step_max`) when a link gave one, the runs lined up by
    `align` (`dashboard.alignment`; `counter` is the metric "samples" reads). The divergence
    search compares shared steps whatever the alignment; the figure shows it where that step
    lands on the aligned axis. A run without any value of the metric there (`logged`, each
    run's metric names, says which lack it outright) reads "no data", never "never"."""
    if not chosen:
        return series_figure([], title="choose runs to compare"), [], html.P("no runs chosen")
    ref = ref if ref in chosen else chosen[0]
    lo, hi = (window or {}).get("step_min"), (window or {}).get("step_max")
    if signals.is_family(metric) and logged is None:
        logged = compare_metrics.logged(reads, scope, chosen)
    through = read_through(metric, logged or {})
    configs, drawn, coarse = fetch(reads, scope, chosen, metric, lo, hi, POINTS, through)
    names = {r: _legend(c.name, r == ref, through.get(r)) for r, c in configs.items()}
    note = rollups_note([names[r] for r in coarse])
    divergence, rows = divergences(drawn, ref, names, metric, (k, n), logged)
    ordered = [ref] + [r for r in configs if r != ref] if ref in configs else list(configs)
    if align != "step":
        fig = compare_aligned.figure(
            reads,
            scope,
            configs,
            drawn,
            ordered,
            names,
            divergence,
            metric,
            mode,
            note,
            align,
            counter,
            (lo, hi),
            POINTS,
        )
    elif mode == "diff" and ref in configs:
        fig = difference_figure(
            (names[ref], drawn[ref]),
            [(names[r], drawn[r]) for r in ordered[1:]],
            title=f"{named(metric)}: difference to reference{note}",
            divergence=divergence,
        )
    else:
        fig = series_figure(
            [(names[r], drawn[r]) for r in ordered],
            title=f"{named(metric)}{note}",
            log_y=_log(metric),
            height=380,
        )
    diff_rows = diff({names[r]: configs[r].config for r in ordered})
    if align == "step":
        fig = zoomed(fig, lo, hi)
    return fig, rows, _diff_table(diff_rows, [names[r] for r in ordered])


def _legend(name: str, reference: bool, own: signals.Signal | None) -> str:
    """A run's name in the legend and tables: "(reference)" after the reference's, and on a
    family's scale the signal it is drawn through ("TRL run · mean |logp diff|")."""
    shown = f"{name} (reference)" if reference else name
    return shown if own is None else f"{shown} · {own.label}"


def _log(metric: str) -> bool:
    scale = signal_views.SCALES.get(metric)
    return scale.log if scale is not None else metric in LOG_SCALE


def _diff_table(rows: list[dict[str, Any]], runs: list[str]) -> Any:
    if not rows:
        return html.P("The configs do not differ.")
    columns = [{"name": "key", "id": "key"}] + [
        {"name": r, "id": f"run{i}"} for i, r in enumerate(runs)
    ]
    columns.append({"name": "why it matters", "id": "why"})
    data = []
    for row in rows:
        item = {"key": row["key"], "why": row["why"]}
        for i, r in enumerate(runs):
            item[f"run{i}"] = row["values"].get(r, "—")
        data.append(item)
    return DataTable(
        id="compare-config-table",
        columns=columns,
        data=data,
        style_cell={
            "fontFamily": "sans-serif",
            "fontSize": "13px",
            "textAlign": "left",
            "whiteSpace": "normal",
            "maxWidth": "360px",
        },
        style_data_conditional=[
            {"if": {"filter_query": "{why} != ''"}, "backgroundColor": "#fff4e5"}
        ],
    )
