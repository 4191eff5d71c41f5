"""The run page's likely cause: which failure mode the run's metrics point at over the page's
step range (`server.analysis.attribution`), its evidence, the recorded settings beside it, and
every check's verdict.

A section of the run page of its own, included by `run.py` through `section`. It is read once
when the page opens, without the GPU contrast (a project-wide bootstrap the hardware page
makes); `mismatch diagnose` and the API's attribution include it.
"""

from __future__ import annotations

import logging

from dash import html
from dash.development.base_component import Component

from dashboard import ids
from server.domain.reads.attribution import RunAttribution
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads

log = logging.getLogger("mismatch_monitor.dashboard")

VERDICT = {True: "pass", False: "fail", None: "not run"}
CELL = {"padding": "2px 10px 2px 0", "verticalAlign": "top", "fontSize": "13px"}


def section(
    reads: Reads,
    scope: ReadScope,
    run_id: str,
    *,
    step_min: int | None = None,
    step_max: int | None = None,
) -> html.Div | None:
    """The section, or None when the attribution could not be read (the page opens without)."""
    try:
        found = reads.attribution.attribution(
            scope, run_id, step_min=step_min, step_max=step_max, gpu=False
        )
    except Exception:
        log.exception("could not attribute run %s", run_id)
        return None
    return html.Div(panel(found), id=ids.RUN_ATTRIBUTION)


def panel(found: RunAttribution) -> list[Component]:
    """The likeliest cause first, then the others' scores and the checks behind them; with
    nothing to read, what is missing and how to get it, and no cause."""
    if found.missing is not None:
        return [html.H4("Likely cause"), html.P(found.missing, id=ids.RUN_ATTRIBUTION_MISSING)]
    top = found.top
    others = ", ".join(f"{h.mode} {h.score:.2f}" for h in found.hypotheses[1:] if h.score > 0)
    rows = [
        html.Tr(
            [
                html.Td(VERDICT[c.passed], style=CELL),
                html.Td(c.name, style=CELL),
                html.Td("" if c.figure is None else f"{c.figure:.3g}", style=CELL),
                html.Td(c.sentence, style=CELL),
            ]
        )
        for c in found.checks
    ]
    return [
        html.H4("Likely cause"),
        html.P([html.B(top.title), f" (score {top.score:.2f}, {found.steps} steps read)"]),
        html.Ul(
            [html.Li(e) for e in top.evidence]
            + [
                html.Li(f"{n.key} = {n.value} {n.effect} it — {n.why}", style={"color": "#555"})
                for n in top.config
            ]
        ),
        html.Div(f"others: {others}" if others else "", style={"color": "#555"}),
        html.Table(html.Tbody(rows), style={"marginTop": "6px"}),
    ]
