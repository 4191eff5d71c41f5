"""The Dash app: a header, a router on the URL path, one module per page."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader, reader_scope, reader_signed_in
from dashboard.pages import buckets, compare, hardware, parity, run, runs
from dashboard.urlstate import parse
from server.domain import urls
from server.services.reads import Reads

PAGES = {
    urls.RUNS: runs,
    urls.RUN: run,
    urls.COMPARE: compare,
    urls.BUCKETS: buckets,
    urls.HARDWARE: hardware,
    urls.PARITY: parity,
}


def _layout(signed_in: Callable[[], bool]) -> Any:
    """The page frame, built per page load: "Sign out" only for a reader with a session (an
    open server has nobody signed in, so it offers none)."""
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
                            ("Compare", urls.COMPARE),
                            ("Buckets", urls.BUCKETS),
                            ("Hardware", urls.HARDWARE),
                            ("Parity", urls.PARITY),
                        )
                    ],
                    *([_sign_out()] if signed_in() else []),
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


def _sign_out() -> Any:
    return html.Form(
        html.Button("Sign out", type="submit"),
        action="/logout",
        method="POST",
        id=ids.SIGN_OUT,
        style={"display": "inline", "float": "right"},
    )


def create_dash(
    reads: Reads,
    *,
    requests_pathname_prefix: str = "/",
    poll_ms: int = 10_000,
    reader: Reader = reader_scope,
    signed_in: Callable[[], bool] = reader_signed_in,
) -> dash.Dash:
    """Build the dashboard over the server's read port; `reader` is the scope of the request's
    reader and `signed_in` whether it has a session (both from the header the sign-in gate
    sets, by default)."""
    app = dash.Dash(
        __name__,
        requests_pathname_prefix=requests_pathname_prefix,
        serve_locally=True,
        suppress_callback_exceptions=True,
        title="Mismatch Monitor",
        update_title="",
    )
    app.layout = partial(_layout, signed_in)

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
