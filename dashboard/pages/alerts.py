"""Alerts page: what fires now and what ended lately, across every project the reader sees,
grouped by incident — firing first, then the most severe, then the newest.

Each incident shows its alerts (run, linked at the alert's step; rule; signal with its meaning;
value and threshold in the signal's units; since when), the likely cause its first message
carried, and who acknowledged it; its page has the timeline and the other actions. Filters by
project, severity, state and run label; the list refreshes on the dashboard's poll like the runs
list. It reads the same query as `GET /api/v1/incidents` through the read port, within the
reader's scope.

Rows can be selected and their incidents acknowledged at once, as an on-call person clears a
night's list (`ACK_JS`): through the API from the browser, as the person signed in, so a
read-only person is shown the API's refusal and every acknowledgement is in the activity log.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from dashboard.pages import alert_rows as rows
from server.domain import urls
from server.domain.alarms import SEVERITIES, Alert
from server.domain.incidents import INCIDENT_STATES, Incident, IncidentState
from server.domain.labels import LabelFilter
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads

LIMIT = 100
CELL = {"padding": "3px 8px", "borderBottom": "1px solid #eee", "textAlign": "left"}
TABLE_CELL = {"textAlign": "left", "fontFamily": "sans-serif", "fontSize": "13px", "padding": "4px"}
ROW_ID_SEP = "~"
"""Between an incident's id and its row's number in a row id (ids never hold it)."""

ACK_JS = """
async function(clicks, selected, comment) {
    const skip = dash_clientside.no_update;
    const incidents = [...new Set((selected || []).map(id => id.split('__SEP__')[0]))];
    if (!clicks) { return [skip, skip, skip]; }
    if (!incidents.length) {
        return ['Select the rows of the incidents to acknowledge.', skip, skip];
    }
    const said = [];
    let acked = 0;
    for (const incident of incidents) {
        try {
            const answer = await fetch(
                '/api/v1/incidents/' + encodeURIComponent(incident) + '/ack',
                {method: 'POST', credentials: 'same-origin',
                 headers: {'Content-Type': 'application/json'},
                 body: JSON.stringify({comment: comment || ''})});
            if (answer.ok) { acked += 1; continue; }
            let detail = answer.statusText;
            try {
                const body = await answer.json();
                const text = typeof body.detail === 'string';
                detail = text ? body.detail : JSON.stringify(body.detail);
            } catch (e) {}
            said.push('Refused (' + answer.status + ') for ' + incident + ': ' + detail);
        } catch (e) {
            said.push('Could not reach the server: ' + e);
        }
    }
    const done = acked ? ['Acknowledged ' + acked + ' incident' + (acked > 1 ? 's' : '') +
        ': their escalations and repeats stop.'] : [];
    return [done.concat(said).join(' '), Date.now(), []];
}
""".replace("__SEP__", ROW_ID_SEP)
"""Acknowledges the selected rows' incidents through the API as the person signed in; says how
many were, and each refusal with the API's reason; what was acknowledged is unticked."""

TICKS_JS = """
function(data, selected) {
    const chosen = new Set(selected || []);
    const rows = [];
    (data || []).forEach((row, n) => { if (chosen.has(row.id)) { rows.push(n); } });
    return rows;
}
"""
"""The table draws its ticks from row positions, and each poll draws it again: a new incident
sorted to the top would move the ticks onto other incidents while the selection (by row id)
stayed, so the person would see one selection and acknowledge another. The ticks follow the
ticked rows' ids instead, in the browser, at once (a server round trip would lose a tick made
meanwhile)."""


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    projects = list(scope.projects) if scope.projects is not None else _seen(reads)
    return html.Div(
        [
            html.H2("Alerts"),
            html.P(
                "Incidents firing now and those that ended in the last 24 hours, in the "
                "projects you read: firing first, then the most severe, then the newest.",
                style={"color": "#555"},
            ),
            html.Div(
                [
                    _dropdown(ids.ALERTS_PROJECT, projects, params.get("project"), "every project"),
                    _dropdown(
                        ids.ALERTS_SEVERITY,
                        list(SEVERITIES),
                        params.get("severity"),
                        "any severity",
                    ),
                    _dropdown(
                        ids.ALERTS_STATE, list(INCIDENT_STATES), params.get("state"), "any state"
                    ),
                    dcc.Input(
                        id=ids.ALERTS_LABEL,
                        value=params.get("label", ""),
                        placeholder="label, e.g. team=rl",
                        debounce=True,
                        style={"marginLeft": "8px", "width": "200px"},
                    ),
                ]
            ),
            html.Div(id=ids.ALERTS_STATUS, style={"color": "#555", "margin": "8px 0"}),
            html.Div(id=ids.ALERTS_LIST),
            _acknowledge(),
            alerts_table(ids.ALERTS_TABLE),
            dcc.Interval(id=ids.ALERTS_POLL, interval=poll_ms),
            dcc.Store(id=ids.ALERTS_DONE),
        ]
    )


def _dropdown(component: str, options: Sequence[str], value: str | None, empty: str) -> Any:
    return dcc.Dropdown(
        id=component,
        options=[{"label": o, "value": o} for o in options],
        value=value if value in options else None,
        placeholder=empty,
        style={"width": "220px", "display": "inline-block", "marginRight": "8px"},
    )


def _acknowledge() -> Any:
    return html.Div(
        [
            html.Button("Acknowledge selected", id=ids.ALERTS_ACK, n_clicks=0),
            dcc.Input(
                id=ids.ALERTS_ACK_COMMENT,
                placeholder="comment (optional)",
                style={"marginLeft": "8px", "width": "260px"},
            ),
            html.Span(id=ids.ALERTS_ACK_RESULT, style={"marginLeft": "12px", "color": "#555"}),
        ],
        style={"margin": "6px 0"},
    )


def _seen(reads: Reads) -> list[str]:
    """A reader of every project picks among the projects that have runs."""
    return sorted({r.project for r in reads.runs.list_runs(ReadScope.of(None), limit=10_000)})


TABLE_COLUMNS = [
    ("incident", "incident", "markdown"),
    ("ack", "acknowledged", "text"),
    ("run", "run", "markdown"),
    ("rule", "rule", "text"),
    ("signal", "signal", "text"),
    ("value", "value", "text"),
    ("threshold", "threshold", "text"),
    ("step", "step", "text"),
    ("since", "since", "text"),
    ("cause", "likely cause", "text"),
]
"""One table for every incident's alerts, each incident's rows together (its headline, its
acknowledgement and its likely cause on its first row): a single component, so the page stays
as fast with a hundred incidents as with one. Run and incident ids cannot hold markdown
syntax (`server.domain.names.ID_PATTERN`), so their links are safe to write as markdown."""


def table_rows(
    incidents: Sequence[Incident],
    alerts: dict[str, list[Alert]],
    causes: dict[str, str],
    now: float,
) -> list[dict[str, str]]:
    """The table's rows, incident by incident in the order given, the first cause first."""
    out = []
    for incident in incidents:
        for n, alert in enumerate(alerts.get(incident.id) or [incident.headline]):
            row = rows.alert_row(alert, now)
            first = n == 0
            headline = rows.headline(incident, now)
            out.append(
                {
                    "id": f"{incident.id}{ROW_ID_SEP}{n}",
                    "incident": f"[{headline}]({urls.incident_view(incident.id)})" if first else "",
                    "ack": rows.ack_line(incident) if first else "",
                    "run": f"[{alert.run_id}]({row['link']})",
                    "cause": (causes.get(incident.id) or rows.NO_CAUSE) if first else "",
                    "severity": alert.severity,
                    **{
                        k: row[k] for k in ("rule", "signal", "value", "threshold", "step", "since")
                    },
                }
            )
    return out


def alerts_table(table_id: str) -> Any:
    return DataTable(
        id=table_id,
        columns=[
            {"id": key, "name": name, "presentation": kind} for key, name, kind in TABLE_COLUMNS
        ],
        data=[],
        page_size=50,
        row_selectable="multi",
        selected_row_ids=[],
        markdown_options={"link_target": "_self"},
        style_cell={**TABLE_CELL, "whiteSpace": "normal", "maxWidth": "360px"},
        style_header={"fontWeight": "bold"},
        style_data_conditional=[
            {
                "if": {"filter_query": f'{{severity}} = "{name}"', "column_id": "rule"},
                "color": colour,
                "fontWeight": "bold",
            }
            for name, colour in rows.SEVERITY_COLOURS.items()
        ],
    )


def incident_cards(
    reads: Reads,
    scope: ReadScope,
    *,
    project: str | None,
    severity: str | None,
    state: IncidentState | None,
    label: str | None,
    now: float,
) -> tuple[list[dict[str, str]], Any, str]:
    """The table's rows, the empty state (None when there are rows), the status line."""
    projects = list(scope.projects) if scope.projects is not None else None
    found = reads.incidents.listed(
        projects=projects,
        project=project,
        state=state,
        severity=severity,
        label=label,
        limit=LIMIT,
        now=now,
    )
    stamp = time.strftime("%H:%M:%S", time.gmtime(now))
    if not found:
        filtered = any((project, severity, state, label))
        note = html.P(rows.empty_note(filtered), id=ids.ALERTS_EMPTY)
        return [], note, f"updated {stamp} UTC"
    alerts = reads.incidents.alerts([i.id for i in found], projects=projects)
    causes = reads.incidents.causes(found)
    firing = sum(1 for i in found if i.state == "firing")
    status = f"{firing} firing, {len(found) - firing} ended · updated {stamp} UTC"
    return table_rows(found, alerts, causes, now), None, status


def register(app: Any, reads: Reads, reader: Reader) -> None:
    app.clientside_callback(
        ACK_JS,
        Output(ids.ALERTS_ACK_RESULT, "children"),
        Output(ids.ALERTS_DONE, "data"),
        Output(ids.ALERTS_TABLE, "selected_row_ids"),
        Input(ids.ALERTS_ACK, "n_clicks"),
        State(ids.ALERTS_TABLE, "selected_row_ids"),
        State(ids.ALERTS_ACK_COMMENT, "value"),
        prevent_initial_call=True,
    )

    app.clientside_callback(
        TICKS_JS,
        Output(ids.ALERTS_TABLE, "selected_rows"),
        Input(ids.ALERTS_TABLE, "data"),
        State(ids.ALERTS_TABLE, "selected_row_ids"),
    )

    @app.callback(
        Output(ids.ALERTS_TABLE, "data"),
        Output(ids.ALERTS_LIST, "children"),
        Output(ids.ALERTS_STATUS, "children"),
        Input(ids.ALERTS_PROJECT, "value"),
        Input(ids.ALERTS_SEVERITY, "value"),
        Input(ids.ALERTS_STATE, "value"),
        Input(ids.ALERTS_LABEL, "value"),
        Input(ids.ALERTS_POLL, "n_intervals"),
        Input(ids.ALERTS_DONE, "data"),
    )
    def draw(
        project: str | None,
        severity: str | None,
        state: str | None,
        label: str | None,
        _poll: int | None,
        _done: Any,
    ) -> tuple[list[dict[str, str]], Any, str]:
        text = (label or "").strip() or None
        if text is not None:
            try:
                LabelFilter.parse(text)
            except ValueError as exc:
                return [], None, f"label filter: {exc}"
        return incident_cards(
            reads,
            reader(),
            project=project,
            severity=severity if severity in SEVERITIES else None,
            state=state if state in INCIDENT_STATES else None,
            label=text,
            now=time.time(),
        )
