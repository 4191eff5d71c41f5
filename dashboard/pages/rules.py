"""Rules page: a project's alarm rules with their pack, kind, signal, parameters, state and the
reason their numbers carry; enable or disable one, edit its parameters, and preview the edit
before saving it.

The preview is a backtest (nothing stored, nobody told): the draft and the rule as saved are
replayed over a chosen run and drawn on its chart, where each would fire, with the count of
alerts each raises on the project's recent runs. Saving and enabling go through the API from
the browser as the person signed in (PATCH /api/v1/rules/{id}), so its validation names the
field of a refused parameter here as it does for the command line, and its role check and
activity log hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dash import Input, Output, State, dcc, html, no_update

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from dashboard.pages.rule_preview import counts_line, preview_figure
from server.domain import signals
from server.domain.alarms import Rule
from server.domain.reads.scope import ReadScope
from server.errors import MonitorError
from server.figures.points import points
from server.services.reads.port import Reads
from server.services.reads.rules import RuleView

RECENT_RUNS = 10
COLUMNS = [
    ("name", "rule"),
    ("pack", "pack"),
    ("kind", "kind"),
    ("signal", "signal"),
    ("severity", "severity"),
    ("params", "parameters"),
    ("enabled", "enabled"),
]
CELL = {"textAlign": "left", "fontFamily": "sans-serif", "fontSize": "13px", "padding": "4px"}

SAVE_JS = """
async function(save, toggle, text, chosen) {
    const skip = dash_clientside.no_update;
    const fired = (dash_clientside.callback_context.triggered || [])[0];
    if (!fired || !fired.value || !chosen) { return [skip, skip]; }
    let body;
    if (fired.prop_id.startsWith('__TOGGLE__')) {
        body = {enabled: !chosen.enabled};
    } else {
        try { body = {params: JSON.parse(text || '{}')}; }
        catch (e) { return ['Refused: the parameters are not JSON (' + e.message + ')', skip]; }
    }
    const answer = await fetch('/api/v1/rules/' + encodeURIComponent(chosen.id), {
        method: 'PATCH', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    if (answer.ok) {
        const saved = await answer.json();
        const state = saved.enabled ? ' (enabled)' : ' (disabled)';
        return ['Saved: ' + saved.name + state, Date.now()];
    }
    let detail = answer.statusText;
    try {
        const said = await answer.json();
        detail = typeof said.detail === 'string' ? said.detail : said.detail.map(
            d => (d.loc || []).filter(x => x !== 'body').join('.') + ': ' + d.msg).join('; ');
    } catch (e) {}
    return ['Refused (' + answer.status + '): ' + detail, skip];
}
""".replace("__TOGGLE__", ids.RULES_TOGGLE)
"""Saves the edited parameters, or flips enabled, through the API as the person signed in."""


def signal_of(rule: Rule) -> str:
    """What a rule watches, in words: a signal family by its name, a metric by its label."""
    if signals.is_family(rule.metric):
        return rule.metric.removeprefix(signals.SIGNAL_PREFIX) + " (every trainer's form)"
    known = signals.BY_METRIC.get(rule.metric)
    return known.label if known is not None else rule.metric


def table_rows(views: Sequence[RuleView]) -> list[dict[str, str]]:
    return [
        {
            "id": v.rule.id,
            "name": v.rule.name,
            "pack": v.pack or "own",
            "kind": v.rule.kind,
            "signal": signal_of(v.rule),
            "severity": v.rule.severity,
            "params": json.dumps(dict(v.rule.params), sort_keys=True),
            "enabled": "yes" if v.rule.enabled else "no",
            "reason": " ".join(v.reason.split()),
        }
        for v in views
    ]


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    projects = (
        list(scope.projects)
        if scope.projects is not None
        else sorted({r.project for r in reads.runs.list_runs(scope, limit=10_000)})
    )
    chosen = params.get("project") if params.get("project") in projects else None
    return html.Div(
        [
            html.H2("Rules"),
            html.P(
                "A project's alarm rules. Pick one to read why its numbers are what they are, "
                "to switch it on or off, or to edit its parameters and preview the edit on a "
                "run before saving it.",
                style={"color": "#555"},
            ),
            dcc.Dropdown(
                id=ids.RULES_PROJECT,
                options=[{"label": p, "value": p} for p in projects],
                value=chosen or (projects[0] if projects else None),
                clearable=False,
                style={"width": "300px"},
            ),
            DataTable(
                id=ids.RULES_TABLE,
                columns=[{"id": key, "name": name} for key, name in COLUMNS],
                data=[],
                row_selectable="single",
                selected_rows=[],
                page_size=30,
                style_cell={**CELL, "whiteSpace": "normal", "maxWidth": "380px"},
                style_header={"fontWeight": "bold"},
            ),
            dcc.Store(id=ids.RULES_SELECTED),
            dcc.Store(id=ids.RULES_DONE, data=0),
            html.Div(id=ids.RULES_REASON, style={"margin": "10px 0", "whiteSpace": "pre-wrap"}),
            html.Div(
                [
                    html.Label("parameters (JSON; merged into the rule's by key)"),
                    dcc.Textarea(id=ids.RULES_PARAMS, style={"width": "100%", "height": "70px"}),
                    html.Label("preview on run", style={"marginRight": "8px"}),
                    dcc.Dropdown(
                        id=ids.RULES_RUN,
                        style={
                            "width": "320px",
                            "display": "inline-block",
                            "verticalAlign": "middle",
                        },
                    ),
                    html.Button("Preview", id=ids.RULES_PREVIEW, style={"marginLeft": "8px"}),
                    html.Button("Save", id=ids.RULES_SAVE, style={"marginLeft": "8px"}),
                    html.Button(
                        "Disable / enable", id=ids.RULES_TOGGLE, style={"marginLeft": "8px"}
                    ),
                ]
            ),
            html.Div(id=ids.RULES_RESULT, style={"margin": "6px 0", "fontWeight": "bold"}),
            html.Div(id=ids.RULES_PREVIEW_NOTE, style={"margin": "6px 0"}),
            dcc.Graph(id=ids.RULES_PREVIEW_GRAPH, figure={"data": [], "layout": {"height": 60}}),
        ]
    )


def _recent(reads: Reads, scope: ReadScope, project: str) -> list[str]:
    found = reads.runs.list_runs(scope, project=project, limit=RECENT_RUNS)
    return [r.id for r in found]


def register(app: Any, reads: Reads, reader: Reader) -> None:
    app.clientside_callback(
        SAVE_JS,
        Output(ids.RULES_RESULT, "children"),
        Output(ids.RULES_DONE, "data"),
        Input(ids.RULES_SAVE, "n_clicks"),
        Input(ids.RULES_TOGGLE, "n_clicks"),
        State(ids.RULES_PARAMS, "value"),
        State(ids.RULES_SELECTED, "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.RULES_TABLE, "data"),
        Output(ids.RULES_RUN, "options"),
        Output(ids.RULES_RUN, "value"),
        Input(ids.RULES_PROJECT, "value"),
        Input(ids.RULES_DONE, "data"),
        State(ids.RULES_RUN, "value"),
    )
    def draw(project: str | None, _done: Any, run: str | None) -> Any:
        if not project:
            return [], [], None
        scope = reader()
        projects = list(scope.projects) if scope.projects is not None else None
        views = reads.rules.listed(project, projects=projects)
        runs = _recent(reads, scope, project)
        return (
            table_rows(views),
            [{"label": r, "value": r} for r in runs],
            run if run in runs else (runs[0] if runs else None),
        )

    @app.callback(
        Output(ids.RULES_REASON, "children"),
        Output(ids.RULES_PARAMS, "value"),
        Output(ids.RULES_SELECTED, "data"),
        Input(ids.RULES_TABLE, "selected_rows"),
        Input(ids.RULES_TABLE, "data"),
    )
    def choose(selected: list[int] | None, data: list[dict[str, str]] | None) -> Any:
        if not selected or not data or selected[0] >= len(data):
            return "Pick a rule in the table.", "", None
        row = data[selected[0]]
        reason = row.get("reason") or "The pack gives this rule no reason of its own."
        chosen = {"id": row["id"], "enabled": row["enabled"] == "yes"}
        return f"{row['name']}: {reason}", row["params"], chosen

    @app.callback(
        Output(ids.RULES_PREVIEW_GRAPH, "figure"),
        Output(ids.RULES_PREVIEW_NOTE, "children"),
        Input(ids.RULES_PREVIEW, "n_clicks"),
        State(ids.RULES_PARAMS, "value"),
        State(ids.RULES_RUN, "value"),
        State(ids.RULES_SELECTED, "data"),
        State(ids.RULES_PROJECT, "value"),
        prevent_initial_call=True,
    )
    def preview(
        _clicks: Any, text: str | None, run: str | None, chosen: Any, project: str | None
    ) -> Any:
        return preview_view(reads, reader(), chosen, text, run, project)


def preview_view(
    reads: Reads,
    scope: ReadScope,
    chosen: Any,
    text: str | None,
    run: str | None,
    project: str | None,
) -> tuple[Any, str]:
    """The preview's figure and its counts line, or the refusal (the field named)."""
    if not chosen or not run or not project:
        return no_update, "Pick a rule and a run to preview on."
    try:
        params = json.loads(text or "{}")
    except ValueError as exc:
        return no_update, f"Refused: the parameters are not JSON ({exc})"
    if not isinstance(params, dict):
        return no_update, "Refused: params must be a JSON object of parameter: value"
    projects = list(scope.projects) if scope.projects is not None else None
    try:
        done = reads.rules.preview(
            chosen["id"],
            params,
            run_id=run,
            recent=_recent(reads, scope, project),
            projects=projects,
        )
        metric = _metric(reads, scope, run, done.draft or done.current, chosen["id"], project)
        series = reads.series.series(scope, run, metric) if metric else None
    except MonitorError as exc:
        return no_update, f"Refused: {exc.message}"
    figure = preview_figure(metric or "?", points(series), done.draft, done.current)
    note = counts_line(done.draft_count, done.current_count, done.recent_runs)
    return figure, note


def _metric(
    reads: Reads, scope: ReadScope, run: str, fired: Sequence[Any], rule_id: str, project: str
) -> str | None:
    """The series to draw: the one the alerts fired on, else the one the rule would read on
    this run (a signal family through the strongest member the run logs)."""
    if fired:
        return str(fired[0].metric)
    projects = list(scope.projects) if scope.projects is not None else None
    rule = next(
        (v.rule for v in reads.rules.listed(project, projects=projects) if v.rule.id == rule_id),
        None,
    )
    if rule is None:
        return None
    present = {m.name for m in reads.runs.list_metrics(scope, run)}
    if signals.is_family(rule.metric):
        found = signals.strongest(rule.metric, present)
        return found.metric if found is not None else None
    return rule.metric if rule.metric in present else None
