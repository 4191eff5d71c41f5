"""Runs page: the runs, a page at a time, with status, last step, each run's mismatch and its trend.

A run's mismatch is its strongest mismatch signal (`server.domain.signals.headline`): k3
("vllm-kl") where it logs it, TRL's mean |logp diff|, OpenRLHF's k1, slime's sequence means
otherwise; the cell names the signal and its tooltip says what it measures.

The server pages, sorts and filters; the page shows its first rows as soon as they come and
fills the trend column afterwards. It polls without piling up: the timer is one-shot and the
load re-arms it when it finishes, and a poll that finds the list's fingerprint unchanged
fetches nothing. Until the first rows arrive it says it is loading, and a failed read says so —
an empty table only ever means there are no runs.
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Input, Output, State, callback_context, dcc, html, no_update

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from dashboard.pages import runs_data
from dashboard.pages.runs_data import Filters
from dashboard.urlstate import encode
from server.domain import urls
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.reads.port import Reads

log = logging.getLogger("mismatch_monitor.dashboard")

COLUMNS = [
    ("name", "run"),
    ("run_id", "run id"),
    ("project", "project"),
    ("labels", "labels"),
    ("status", "status"),
    ("last_step", "last step"),
    ("mismatch", "mismatch"),
    ("trend", "mismatch trend"),
    ("gpus", "GPU types"),
    ("alarms", "firing alarms"),
]
INLINE = {"marginLeft": "8px"}
# Shown while a load is in flight for longer than 0.4 s (so quick polls never flash it): the
# rows on screen are the previous list's until the new one arrives.
BUSY = {"visibility": "visible", "color": "#777", "transition": "visibility 0s linear 0.4s"}
IDLE = {"visibility": "hidden", "color": "#777", "transition": "visibility 0s"}
POLL = f"{ids.RUNS_REFRESH}.n_intervals"
RESTARTS = {
    f"{ids.RUNS_FILTER_PROJECT}.value",
    f"{ids.RUNS_FILTER_LABEL}.value",
    f"{ids.RUNS_FILTER_TEXT}.value",
    f"{ids.RUNS_TABLE}.sort_by",
}


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    return html.Div(
        [
            html.H2("Runs"),
            _filters(reads.runs.projects(scope), params),
            html.Div(
                [
                    html.Span("loading runs…", id=ids.RUNS_STATUS),
                    html.Span(" ⟳ loading…", id=ids.RUNS_BUSY, style=IDLE),
                ],
                style={"margin": "6px 0"},
            ),
            _table(),
            html.Div(id=ids.RUNS_OPEN_LINKS, style={"marginTop": "8px"}),
            dcc.Store(id=ids.RUNS_CURSORS, data=[None]),
            dcc.Store(id=ids.RUNS_VERSION, data=None),
            dcc.Store(id=ids.RUNS_PAGE_IDS, data=[]),
            dcc.Store(id=ids.RUNS_TICKED, data=[]),  # the ticked runs, in the order ticked
            # One-shot: each load re-arms it when done, so polls never overlap.
            dcc.Interval(id=ids.RUNS_REFRESH, interval=poll_ms, max_intervals=1),
        ]
    )


def _filters(projects: list[str], params: dict[str, str]) -> Any:
    return html.Div(
        [
            dcc.Dropdown(
                id=ids.RUNS_FILTER_PROJECT,
                options=[{"label": p, "value": p} for p in projects],
                value=params.get("project"),
                placeholder="all projects",
                style={"width": "220px", "display": "inline-block", "verticalAlign": "middle"},
            ),
            dcc.Input(
                id=ids.RUNS_FILTER_LABEL,
                value=params.get("label", ""),
                placeholder="label k or k=v",
                debounce=True,
                style=INLINE,
            ),
            dcc.Input(
                id=ids.RUNS_FILTER_TEXT,
                value=params.get("text", ""),
                placeholder="search name",
                debounce=True,
                style=INLINE,
            ),
            dcc.Link(
                "Compare selected",
                id=ids.RUNS_COMPARE_LINK,
                href=urls.COMPARE,
                style={"marginLeft": "16px"},
            ),
        ]
    )


def _table() -> Any:
    return DataTable(
        id=ids.RUNS_TABLE,
        columns=[
            {
                "name": label,
                "id": key,
                "sortable": key in runs_data.SORTABLE,
                **({"presentation": "markdown"} if key == "name" else {}),
            }
            for key, label in COLUMNS
        ],
        markdown_options={"html": False, "link_target": "_self"},
        data=[],
        tooltip_data=[],
        tooltip_delay=200,
        tooltip_duration=None,
        row_selectable="multi",
        selected_rows=[],
        page_action="custom",
        page_current=0,
        page_size=runs_data.PAGE_SIZE,
        page_count=1,
        sort_action="custom",
        sort_mode="single",
        sort_by=[],
        style_cell={
            "fontFamily": "sans-serif",
            "fontSize": "13px",
            "textAlign": "left",
            "maxWidth": "280px",
            "overflow": "hidden",
            "textOverflow": "ellipsis",
        },
        style_data_conditional=[
            {"if": {"filter_query": "{status} = live"}, "color": "#009E73", "fontWeight": "bold"},
            {
                "if": {"filter_query": "{alarms} > 0", "column_id": "alarms"},
                "color": "#D55E00",
                "fontWeight": "bold",
            },
        ],
    )


def load(
    reads: Reads,
    scope: ReadScope,
    trigger: str | None,
    filters: Filters,
    page: int,
    sort_by: list[dict[str, str]] | None,
    cursors: list[str | None] | None,
    version: str | None,
) -> tuple[Any, ...]:
    """(rows, page count, status, cursors, version, page's run ids, timer re-arm, tooltips):
    a poll that finds nothing changed touches only the timer."""
    rearm = 0
    if trigger in RESTARTS:  # another list: page through it from its first page
        cursors, page = [None], 0
    try:
        now = reads.runs.runs_version(
            scope, project=filters.project, label=filters.label, text=filters.text
        )
        if trigger == POLL and now == version:
            return (no_update,) * 6 + (rearm, no_update)
        found, cursors = runs_data.fetch_page(
            reads, scope, filters, sort_by, page, cursors or [None]
        )
    except Rejected as exc:
        message = f"filter: {exc.message}"
        return (no_update, no_update, message, no_update, None, no_update, rearm, no_update)
    except Exception:
        log.exception("could not list runs")
        return (
            no_update,
            no_update,
            "could not load runs; the server log has the details",
            no_update,
            None,
            no_update,
            rearm,
            no_update,
        )
    rows = [runs_data.row(s) for s in found.runs]
    status = f"{found.total} runs" if found.total else "no runs yet"
    return (
        rows,
        runs_data.page_count(found.total),
        status,
        cursors,
        now,
        [r["id"] for r in rows],
        rearm,
        runs_data.tooltips(found.runs),
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.RUNS_TABLE, "data"),
        Output(ids.RUNS_TABLE, "page_count"),
        Output(ids.RUNS_STATUS, "children"),
        Output(ids.RUNS_CURSORS, "data"),
        Output(ids.RUNS_VERSION, "data"),
        Output(ids.RUNS_PAGE_IDS, "data"),
        Output(ids.RUNS_REFRESH, "n_intervals"),
        Output(ids.RUNS_TABLE, "tooltip_data"),
        Input(ids.RUNS_FILTER_PROJECT, "value"),
        Input(ids.RUNS_FILTER_LABEL, "value"),
        Input(ids.RUNS_FILTER_TEXT, "value"),
        Input(ids.RUNS_TABLE, "page_current"),
        Input(ids.RUNS_TABLE, "sort_by"),
        Input(ids.RUNS_REFRESH, "n_intervals"),
        State(ids.RUNS_CURSORS, "data"),
        State(ids.RUNS_VERSION, "data"),
        running=[(Output(ids.RUNS_BUSY, "style"), BUSY, IDLE)],
    )
    def _load(
        project: str | None,
        label: str | None,
        text: str | None,
        page: int | None,
        sort_by: list[dict[str, str]] | None,
        _tick: Any,
        cursors: list[str | None] | None,
        version: str | None,
    ) -> tuple[Any, ...]:
        trigger = callback_context.triggered[0]["prop_id"] if callback_context.triggered else None
        filters = Filters(project or None, label or None, text or None)
        return load(reads, reader(), trigger, filters, page or 0, sort_by, cursors, version)

    @app.callback(
        Output(ids.RUNS_TABLE, "data", allow_duplicate=True),
        Input(ids.RUNS_PAGE_IDS, "data"),
        State(ids.RUNS_TABLE, "data"),
        prevent_initial_call=True,
    )
    def _trends(run_ids: list[str], rows: list[dict[str, Any]] | None) -> Any:
        if not run_ids or not rows:
            return no_update
        try:
            found = reads.runs.trends(reader(), run_ids, points=30)  # each one's headline
        except Exception:
            log.exception("could not read the trends")
            found = {}
        return runs_data.with_trends(rows, found)

    @app.callback(
        Output(ids.RUNS_COMPARE_LINK, "href"),
        Output(ids.RUNS_OPEN_LINKS, "children"),
        Output(ids.RUNS_TICKED, "data"),
        Input(ids.RUNS_TABLE, "selected_row_ids"),
        State(ids.RUNS_TICKED, "data"),
    )
    def _selection(now: list[str] | None, before: list[str] | None) -> Any:
        chosen = ticked(before, now)
        return (*selection(chosen), chosen)

    app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUNS_FILTER_PROJECT, "value"),
        Input(ids.RUNS_FILTER_LABEL, "value"),
        Input(ids.RUNS_FILTER_TEXT, "value"),
        prevent_initial_call=True,
    )(sync_url)


def ticked(before: list[str] | None, now: list[str] | None) -> list[str]:
    """The runs ticked now, in the order they were ticked: those ticked before keep their
    place, the newly ticked follow (the table itself lists them in its row order)."""
    current = list(dict.fromkeys(now or []))
    kept = [r for r in before or [] if r in current]
    return kept + [r for r in current if r not in kept]


def selection(chosen: list[str] | None) -> tuple[str, list[Any]]:
    """The compare link of the ticked runs, the first ticked named as the reference (the table
    keeps the order they were ticked in), and a link to open each."""
    chosen = list(chosen or [])
    links = [
        dcc.Link(f"open {run_id}", href=urls.run_view(run_id), style={"marginRight": "12px"})
        for run_id in chosen
    ]
    return urls.compare_view(chosen, reference=chosen[0] if chosen else None), links


def sync_url(project: str | None, label: str | None, text: str | None) -> str:
    return encode({"project": project, "label": label, "text": text})
