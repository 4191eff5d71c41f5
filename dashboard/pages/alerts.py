"""Alerts page: what fires now and what ended lately, across every project the reader sees,
grouped by incident — firing first, then the most severe, then the newest.

Each incident shows its alerts (run, linked at the alert's step; rule; signal with its meaning;
value and threshold in the signal's units; since when), the likely cause its first message
carried, and who acknowledged it; its page has the timeline and the actions. Filters by project,
severity, state and run label; the list refreshes on the dashboard's poll like the runs list.
It reads the same query as `GET /api/v1/incidents` through the read port, within the reader's
scope.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dash import Input, Output, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.pages import alert_rows as rows
from server.domain import urls
from server.domain.alarms import SEVERITIES, Alert
from server.domain.incidents import INCIDENT_STATES, Incident, IncidentState
from server.domain.labels import LabelFilter
from server.domain.reads.scope import ReadScope
from server.services.reads import Reads

LIMIT = 100
CELL = {"padding": "3px 8px", "borderBottom": "1px solid #eee", "textAlign": "left"}
CARD = {
    "border": "1px solid #ddd",
    "borderRadius": "6px",
    "padding": "8px 12px",
    "marginBottom": "12px",
}


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
            dcc.Interval(id=ids.ALERTS_POLL, interval=poll_ms),
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


def _seen(reads: Reads) -> list[str]:
    """A reader of every project picks among the projects that have runs."""
    return sorted({r.project for r in reads.runs.list_runs(ReadScope.of(None), limit=10_000)})


def card(incident: Incident, alerts: Sequence[Alert], cause: str | None, now: float) -> Any:
    """One incident: its headline, acknowledgement, likely cause and alerts."""
    colour = rows.SEVERITY_COLOURS.get(incident.severity, "#333")
    return html.Div(
        [
            html.Div(
                [
                    html.Span(
                        rows.headline(incident, now), style={"fontWeight": "bold", "color": colour}
                    ),
                    dcc.Link(
                        "open incident",
                        href=urls.incident_view(incident.id),
                        style={"marginLeft": "12px"},
                        className="incident-link",
                    ),
                ]
            ),
            html.Div(rows.ack_line(incident), style={"color": "#555"}),
            html.Div(cause or rows.NO_CAUSE, style={"color": "#333", "fontStyle": "italic"}),
            alerts_table(alerts, now),
        ],
        id={"type": ids.ALERTS_CARD, "index": incident.id},
        style={**CARD, "borderLeft": f"6px solid {colour}"},
    )


def alerts_table(alerts: Sequence[Alert], now: float) -> Any:
    """The alerts of an incident, each run linked at the alert's step."""
    header = html.Tr(
        [html.Th("run", style=CELL), *[html.Th(name, style=CELL) for _, name in rows.ALERT_COLUMNS]]
    )
    body = []
    for alert in alerts:
        row = rows.alert_row(alert, now)
        run = dcc.Link(alert.run_id, href=row["link"])
        body.append(
            html.Tr(
                [
                    html.Td(run, style=CELL),
                    *[html.Td(row[key], style=CELL) for key, _ in rows.ALERT_COLUMNS],
                ],
                className="alert-row",
            )
        )
    return html.Table(
        [html.Thead(header), html.Tbody(body)],
        style={"borderCollapse": "collapse", "fontSize": "13px"},
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
) -> tuple[list[Any], str]:
    """The cards, and the status line (how many, and when), or the empty state."""
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
        return [html.P(rows.empty_note(filtered), id=ids.ALERTS_EMPTY)], f"updated {stamp} UTC"
    alerts = reads.incidents.alerts([i.id for i in found], projects=projects)
    causes = reads.incidents.causes(found)
    cards = [card(i, alerts.get(i.id, [i.headline]), causes.get(i.id), now) for i in found]
    firing = sum(1 for i in found if i.state == "firing")
    return cards, f"{firing} firing, {len(found) - firing} ended · updated {stamp} UTC"


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.ALERTS_LIST, "children"),
        Output(ids.ALERTS_STATUS, "children"),
        Input(ids.ALERTS_PROJECT, "value"),
        Input(ids.ALERTS_SEVERITY, "value"),
        Input(ids.ALERTS_STATE, "value"),
        Input(ids.ALERTS_LABEL, "value"),
        Input(ids.ALERTS_POLL, "n_intervals"),
    )
    def draw(
        project: str | None,
        severity: str | None,
        state: str | None,
        label: str | None,
        _poll: int | None,
    ) -> tuple[list[Any], str]:
        text = (label or "").strip() or None
        if text is not None:
            try:
                LabelFilter.parse(text)
            except ValueError as exc:
                return [], f"label filter: {exc}"
        return incident_cards(
            reads,
            reader(),
            project=project,
            severity=severity if severity in SEVERITIES else None,
            state=state if state in INCIDENT_STATES else None,
            label=text,
            now=time.time(),
        )
