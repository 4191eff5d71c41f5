"""Incident page: one incident's alerts, its timeline (alerts opening and ending, each
notification with its receiver, attempts, outcome and the diagnosis it carried, silences and
acknowledgements with who), and the actions an on-call person takes from here.

The actions go through the server's API from the browser, as the person signed in
(`ACT_JS`): acknowledge (POST /api/v1/incidents/{id}/ack), silence the run, the rule or a label
for a chosen duration (POST /api/v1/silences), end a silence (DELETE /api/v1/silences/{id}).
The API checks the person's role, validates, and records each in the activity log, so the page
holds no rule of its own about who may do what: a read-only person is shown the API's refusal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dash import ALL, Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.pages import alert_rows as rows
from dashboard.pages.alerts import CELL
from server.domain import urls
from server.domain.alarms import Alert
from server.domain.incidents import Timeline
from server.domain.reads.scope import ReadScope
from server.errors import NotFound
from server.services.reads.port import Reads

DURATIONS = [
    ("1 hour", 3600),
    ("4 hours", 4 * 3600),
    ("12 hours", 12 * 3600),
    ("1 day", 86400),
    ("1 week", 7 * 86400),
]
EVENT_COLUMNS = [
    ("at", "at"),
    ("kind", "what happened"),
    ("what", ""),
    ("by", "by"),
    ("detail", "detail"),
]

ACT_JS = (
    """
async function(ack, onRun, onRule, onLabel, ends, comment, duration, label, ctx) {
    const skip = dash_clientside.no_update;
    const fired = (dash_clientside.callback_context.triggered || [])[0];
    if (!fired || !fired.value || !ctx) { return [skip, skip]; }
    const id = fired.prop_id.slice(0, fired.prop_id.lastIndexOf('.'));
    const until = Date.now() / 1000 + Number(duration || 3600);
    const note = ' silenced from incident ' + ctx.incident;
    const scope = {project: ctx.project, until: until};
    let method = 'POST', url = '/api/v1/silences', body = null, done = '';
    if (id === '__ACK__') {
        url = '/api/v1/incidents/' + encodeURIComponent(ctx.incident) + '/ack';
        body = {comment: comment || ''};
        done = 'Acknowledged: its escalations and repeats stop.';
    } else if (id === '__RUN__') {
        body = Object.assign(scope, {run_id: ctx.run, comment: 'run' + note});
        done = 'Run ' + ctx.run + ' silenced.';
    } else if (id === '__RULE__') {
        body = Object.assign(scope, {rule_id: ctx.rule, comment: 'rule' + note});
        done = 'Rule ' + ctx.rule_name + ' silenced.';
    } else if (id === '__LABEL__') {
        body = Object.assign(scope, {label: label || '', comment: 'label' + note});
        done = 'Label ' + (label || '') + ' silenced.';
    } else {
        method = 'DELETE';
        url = '/api/v1/silences/' + encodeURIComponent(JSON.parse(id).index);
        done = 'Silence ended.';
    }
    const headers = {'Content-Type': 'application/json'};
    const options = {method: method, credentials: 'same-origin', headers: headers};
    if (body !== null) { options.body = JSON.stringify(body); }
    try {
        const answer = await fetch(url, options);
        if (answer.ok) { return [done, Date.now()]; }
        let detail = answer.statusText;
        try {
            const said = await answer.json();
            detail = typeof said.detail === 'string' ? said.detail : JSON.stringify(said.detail);
        } catch (e) {}
        return ['Refused (' + answer.status + '): ' + detail, skip];
    } catch (e) {
        return ['Could not reach the server: ' + e, skip];
    }
}
""".replace("__ACK__", ids.INC_ACK)
    .replace("__RUN__", ids.INC_SILENCE_RUN)
    .replace("__RULE__", ids.INC_SILENCE_RULE)
    .replace("__LABEL__", ids.INC_SILENCE_LABEL)
)
"""Acts through the API as the person signed in; shows what happened, or the API's refusal."""


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    incident_id = params.get("id")
    if not incident_id:
        return html.Div(
            [html.H3("No incident selected"), dcc.Link("see the alerts", href=urls.ALERTS)]
        )
    try:
        timeline = reads.incidents.get(incident_id, projects=_projects(scope))
    except NotFound as exc:
        return html.Div(
            [
                html.H3("Incident not found"),
                html.P(str(exc)),
                dcc.Link("see the alerts", href=urls.ALERTS),
            ]
        )
    head = timeline.incident.headline
    context = {
        "incident": incident_id,
        "project": head.project,
        "run": head.run_id,
        "rule": head.rule_id,
        "rule_name": head.rule_name,
    }
    return html.Div(
        [
            dcc.Link("← alerts", href=urls.ALERTS),
            dcc.Store(id=ids.INC_CONTEXT, data=context),
            dcc.Store(id=ids.INC_DONE, data=0),
            html.Div(id=ids.INC_HEADER, children=_header(timeline, time.time())),
            _actions(head.rule_name, head.run_id),
            html.Div(id=ids.INC_RESULT, style={"margin": "6px 0", "fontWeight": "bold"}),
            html.H4("Alerts"),
            html.Div(id=ids.INC_ALERTS, children=alerts_table(timeline.alerts, time.time())),
            html.H4("Silences that cover it"),
            html.Div(id=ids.INC_SILENCES, children=_silences(timeline, time.time())),
            html.H4("Timeline"),
            html.Div(id=ids.INC_TIMELINE, children=_timeline(timeline)),
            dcc.Interval(id=ids.INC_POLL, interval=poll_ms),
        ]
    )


def alerts_table(alerts: Sequence[Alert], now: float) -> Any:
    """An incident's alerts, each run linked at the alert's step."""
    header = html.Tr(
        [html.Th("run", style=CELL), *[html.Th(n, style=CELL) for _, n in rows.ALERT_COLUMNS]]
    )
    body = []
    for alert in alerts:
        row = rows.alert_row(alert, now)
        cells = [html.Td(row[key], style=CELL) for key, _ in rows.ALERT_COLUMNS]
        run = html.Td(dcc.Link(alert.run_id, href=row["link"]), style=CELL)
        body.append(html.Tr([run, *cells], className="alert-row"))
    style = {"borderCollapse": "collapse", "fontSize": "13px"}
    return html.Table([html.Thead(header), html.Tbody(body)], style=style)


def _projects(scope: ReadScope) -> list[str] | None:
    return list(scope.projects) if scope.projects is not None else None


def _header(timeline: Timeline, now: float) -> Any:
    incident = timeline.incident
    colour = rows.SEVERITY_COLOURS.get(incident.severity, "#333")
    head = incident.headline
    return [
        html.H2(f"Incident {incident.id}"),
        html.Div(rows.headline(incident, now), style={"fontWeight": "bold", "color": colour}),
        html.Div(rows.sentence(head)),
        html.Div(rows.signal_text(head.metric), style={"color": "#555"}),
        html.Div(rows.ack_line(incident), id=f"{ids.INC_HEADER}-ack", style={"color": "#555"}),
        dcc.Link(
            f"run {head.run_id} at step {head.step}",
            href=urls.run_view(head.run_id, project=head.project, step=head.step),
        ),
    ]


def _actions(rule_name: str, run_id: str) -> Any:
    button = {"marginRight": "8px"}
    return html.Div(
        [
            dcc.Input(
                id=ids.INC_ACK_COMMENT,
                placeholder="comment (optional)",
                style={"width": "220px", "marginRight": "8px"},
            ),
            html.Button("Acknowledge", id=ids.INC_ACK, style=button),
            html.Span("Silence for ", style={"marginLeft": "16px"}),
            dcc.Dropdown(
                id=ids.INC_DURATION,
                options=[{"label": name, "value": seconds} for name, seconds in DURATIONS],
                value=3600,
                clearable=False,
                style={"width": "120px", "display": "inline-block", "verticalAlign": "middle"},
            ),
            html.Button(
                f"this run ({run_id})",
                id=ids.INC_SILENCE_RUN,
                style={**button, "marginLeft": "8px"},
            ),
            html.Button(f"this rule ({rule_name})", id=ids.INC_SILENCE_RULE, style=button),
            dcc.Input(
                id=ids.INC_LABEL,
                placeholder="label, e.g. team=rl",
                style={"width": "160px", "marginRight": "4px"},
            ),
            html.Button("this label", id=ids.INC_SILENCE_LABEL, style=button),
        ],
        style={"margin": "10px 0"},
    )


def _silences(timeline: Timeline, now: float) -> Any:
    if not timeline.silences:
        return html.P("None.", style={"color": "#555"})
    items = []
    for s in timeline.silences:
        what = ", ".join(
            f"{k} {v}" for k, v in (("rule", s.rule_id), ("run", s.run_id), ("label", s.label)) if v
        )
        active = s.until > now
        state = f"until {rows.utc(s.until)}" if active else f"ended {rows.utc(s.until)}"
        parts: list[Any] = [html.Span(f"{what or 'the project'} · {state} · {s.comment}")]
        if active:
            parts.append(
                html.Button(
                    "End silence",
                    id={"type": ids.INC_SILENCE_END, "index": s.id},
                    style={"marginLeft": "8px"},
                )
            )
        items.append(html.Li(parts, className="silence-item"))
    return html.Ul(items)


def _timeline(timeline: Timeline) -> Any:
    header = html.Tr([html.Th(name, style=CELL) for _, name in EVENT_COLUMNS])
    body = [
        html.Tr(
            [html.Td(row[key], style=CELL) for key, _ in EVENT_COLUMNS], className="timeline-row"
        )
        for row in (rows.event_row(e) for e in timeline.events)
    ]
    return html.Table(
        [html.Thead(header), html.Tbody(body)],
        style={"borderCollapse": "collapse", "fontSize": "13px"},
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    app.clientside_callback(
        ACT_JS,
        Output(ids.INC_RESULT, "children"),
        Output(ids.INC_DONE, "data"),
        Input(ids.INC_ACK, "n_clicks"),
        Input(ids.INC_SILENCE_RUN, "n_clicks"),
        Input(ids.INC_SILENCE_RULE, "n_clicks"),
        Input(ids.INC_SILENCE_LABEL, "n_clicks"),
        Input({"type": ids.INC_SILENCE_END, "index": ALL}, "n_clicks"),
        State(ids.INC_ACK_COMMENT, "value"),
        State(ids.INC_DURATION, "value"),
        State(ids.INC_LABEL, "value"),
        State(ids.INC_CONTEXT, "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.INC_HEADER, "children"),
        Output(ids.INC_ALERTS, "children"),
        Output(ids.INC_SILENCES, "children"),
        Output(ids.INC_TIMELINE, "children"),
        Input(ids.INC_DONE, "data"),
        Input(ids.INC_POLL, "n_intervals"),
        State(ids.INC_CONTEXT, "data"),
        prevent_initial_call=True,
    )
    def redraw(_done: Any, _poll: Any, context: dict[str, str] | None) -> tuple[Any, Any, Any, Any]:
        if not context:
            return [], [], [], []
        timeline = reads.incidents.get(context["incident"], projects=_projects(reader()))
        now = time.time()
        return (
            _header(timeline, now),
            alerts_table(timeline.alerts, now),
            _silences(timeline, now),
            _timeline(timeline),
        )
