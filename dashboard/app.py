"""The Dash app: a header, a router on the URL path, one module per page."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Badge, Reader, reader_badge, reader_scope
from dashboard.pages import (
    activity,
    alerts,
    buckets,
    compare,
    hardware,
    incident,
    parity,
    rules,
    run,
    runs,
)
from dashboard.urlstate import parse
from server.domain import urls
from server.services.reads.port import Reads

PAGES = {
    urls.RUNS: runs,
    urls.RUN: run,
    urls.COMPARE: compare,
    urls.BUCKETS: buckets,
    urls.HARDWARE: hardware,
    urls.PARITY: parity,
    urls.ACTIVITY: activity,
    urls.ALERTS: alerts,
    urls.INCIDENT: incident,
    urls.RULES: rules,
}


def _layout(badge: Callable[[], Badge | None]) -> Any:
    """The page frame, built per page load: who is signed in, and "Sign out" only for a reader
    with a session (an open server has nobody signed in, so it names nobody and offers none;
    behind an auth proxy the proxy signs people out)."""
    who = badge()
    return html.Div(
        [
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            html.Div(
                [
                    html.Span(
                        "Mismatch Monitor", style={"fontWeight": "bold", "marginRight": "24px"}
                    ),
                    *[
                        dcc.Link(label, href=path, style={"marginRight": "16px"})
                        for label, path in (
                            ("Runs", urls.RUNS),
                            ("Alerts", urls.ALERTS),
                            ("Rules", urls.RULES),
                            ("Compare", urls.COMPARE),
                            ("Buckets", urls.BUCKETS),
                            ("Hardware", urls.HARDWARE),
                            ("Parity", urls.PARITY),
                            ("Activity", urls.ACTIVITY),
                        )
                    ],
                    *([] if who is None else [_signed_in_as(who)]),
                ],
                id=ids.NAV,
                style={
                    "padding": "10px 16px",
                    "borderBottom": "1px solid #ddd",
                    "fontFamily": "sans-serif",
                },
            ),
            html.Div(
                id=ids.PAGE,
                style={"padding": "12px 16px", "fontFamily": "sans-serif", "maxWidth": "1400px"},
            ),
        ]
    )


def _signed_in_as(who: Badge) -> Any:
    """Who is signed in ("Signed in as alice@lab (admin of alpha)") at the right of the header,
    with the sign-out form (a POST, as the server requires) where a session stands behind the
    reader."""
    sign_out = html.Form(
        html.Button("Sign out", type="submit"),
        action="/logout",
        method="POST",
        id=ids.SIGN_OUT,
        style={"display": "inline", "marginLeft": "12px"},
    )
    return html.Span(
        [html.Span(who.shown(), id=ids.SIGNED_IN_AS), *([sign_out] if who.signed_in else [])],
        style={"float": "right", "color": "#444"},
    )


def create_dash(
    reads: Reads,
    *,
    requests_pathname_prefix: str = "/",
    poll_ms: int = 10_000,
    reader: Reader = reader_scope,
    badge: Callable[[], Badge | None] = reader_badge,
) -> dash.Dash:
    """Build the dashboard over the server's read port; `reader` is the scope of the request's
    reader and `badge` who that reader is (both from the header the sign-in gate sets, by
    default)."""
    app = dash.Dash(
        __name__,
        requests_pathname_prefix=requests_pathname_prefix,
        serve_locally=True,
        suppress_callback_exceptions=True,
        title="Mismatch Monitor",
        update_title="",
    )
    app.layout = partial(_layout, badge)

    @app.callback(
        Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), State(ids.URL, "search")
    )
    def route(pathname: str | None, search: str | None) -> Any:
        path = pathname or "/"
        prefix = requests_pathname_prefix.rstrip("/")
        if prefix and path.startswith(prefix):
            path = path[len(prefix) :] or "/"
        page = PAGES.get(path.rstrip("/") or "/")
        if page is None:
            return html.Div([html.H3("Not found"), dcc.Link("back to runs", href="/")])
        return page.layout(reads, reader(), parse(search), poll_ms=poll_ms)

    for page in PAGES.values():
        page.register(app, reads, reader)
    return app
