"""The run page's full-resolution CSV: a link to the export API (every stored value of every
metric over the shown step range, streamed as CSV), which follows the page's view and which the
reader's session opens as it opens the page — the same source a notebook reads."""

from __future__ import annotations

import urllib.parse
from typing import Any

from dash import Input, Output, html

from dashboard import ids
from dashboard.pages.run_data import View, ViewData


def href(view: View) -> str:
    """Where the view's values at full resolution download from."""
    query = {
        "runs": view.run,
        "project": view.project,
        "step_min": view.step_min,
        "step_max": view.step_max,
        "format": "csv",
    }
    shown = {k: str(v) for k, v in query.items() if v is not None}
    return "/api/v1/export?" + urllib.parse.urlencode(shown)


def link(view: View) -> Any:
    return html.A(
        "full-resolution CSV",
        id=ids.RUN_FULL_CSV,
        href=href(view),
        title="Every stored value over the shown steps (GET /api/v1/export)",
        style={"marginLeft": "12px"},
    )


def register(app: Any) -> None:
    @app.callback(Output(ids.RUN_FULL_CSV, "href"), Input(ids.RUN_VIEW, "data"))
    def _follow(view: ViewData) -> str:
        return href(View.from_dict(view))
