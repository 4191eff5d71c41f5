"""The run page's alerts, under its charts: each alert's sentence, value, threshold, state and
the likely cause its incident's first message carried, linked to its incident."""

from __future__ import annotations

import time
from typing import Any

from dash import dcc, html

from dashboard import ids
from dashboard.pages import alert_rows as rows
from server.domain import urls
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads

LIMIT = 200


def section(reads: Reads, scope: ReadScope, run_id: str) -> Any:
    projects = list(scope.projects) if scope.projects is not None else None
    alerts = reads.incidents.of_run(run_id, projects=projects, limit=LIMIT)
    if not alerts:
        body: Any = html.P(
            "No alert has fired on this run. Its project's rules watch it as it logs; the "
            "alerts page lists what fires across your projects.",
            style={"color": "#555"},
        )
    else:
        causes = reads.incidents.causes_of(alerts)
        now = time.time()
        items = []
        for alert in alerts:
            incident = alert.incident_id or alert.id
            state = rows.STATE_WORDS.get(alert.state, alert.state)
            if alert.silenced:
                state += ", silenced"
            line = (
                f"{alert.severity} · {state} · {rows.sentence(alert)} "
                f"(value {rows.number(alert.value)}, threshold {rows.number(alert.threshold)}) · "
                f"{rows.ago(now - alert.started_at)}"
            )
            parts: list[Any] = [html.Span(line)]
            if not alert.silenced:
                parts.append(
                    dcc.Link(
                        "incident", href=urls.incident_view(incident), style={"marginLeft": "8px"}
                    )
                )
            cause = causes.get(incident)
            if cause:
                parts.append(html.Div(cause, style={"color": "#555", "fontStyle": "italic"}))
            items.append(html.Li(parts, className="run-alert"))
        body = html.Ul(items)
    return html.Div([html.H4("Alerts"), body], id=ids.RUN_ALERT_LIST, style={"marginTop": "12px"})
