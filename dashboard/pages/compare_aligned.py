"""The compare page's alignment: the "align by" control and the figure with runs placed by wall
time or by a samples-seen counter instead of by step (the placing itself is
`dashboard.alignment`, pure)."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from dashboard import ids
from dashboard.alignment import (
    ALIGNS,
    AXIS_TITLES,
    DEFAULT_COUNTER,
    aligned,
    parse_align,
    x_at_step,
)
from server.domain import signal_views
from server.domain.metrics import LOG_SCALE
from server.domain.reads.runs import RunConfig
from server.domain.reads.scope import ReadScope
from server.figures.points import Point, points
from server.figures.series import difference_figure, series_figure
from server.figures.text import named
from server.services.reads.port import Reads


def link(align: str | None, counter: str | None) -> dict[str, str]:
    """The alignment's part of the page's URL; the defaults stay out of it."""
    align = parse_align(align)
    state = {} if align == "step" else {"align": align}
    if align == "samples" and counter and counter != DEFAULT_COUNTER:
        state["counter"] = counter
    return state


def controls(params: dict[str, str]) -> Any:
    """Runs from several places line up by step, by wall time or by a samples-seen counter."""
    return html.Div(
        [
            html.Span("align by "),
            dcc.RadioItems(
                id=ids.CMP_ALIGN,
                options=[{"label": label, "value": key} for key, label in ALIGNS.items()],
                value=parse_align(params.get("align")),
                inline=True,
                style={"display": "inline-block"},
            ),
            html.Span(" counter metric ", style={"marginLeft": "12px"}),
            dcc.Input(
                id=ids.CMP_COUNTER,
                type="text",
                value=params.get("counter") or DEFAULT_COUNTER,
                debounce=True,
                style={"width": "200px"},
            ),
        ],
        style={"marginTop": "8px"},
    )


def figure(
    reads: Reads,
    scope: ReadScope,
    configs: dict[str, RunConfig],
    drawn: dict[str, list[Point]],
    ordered: list[str],
    names: dict[str, str],
    divergence: dict[str, int | None],
    metric: str,
    mode: str,
    note: str,
    align: str,
    counter: str,
    window: tuple[int | None, int | None],
    max_points: int,
) -> Any:
    """The overlay or difference figure with the runs placed by `align` instead of by step."""
    counters: dict[str, list[Point]] = {}
    if align == "samples":
        lo, hi = window
        counters = {
            r: points(
                reads.series.series(
                    scope, r, counter, step_min=lo, step_max=hi, max_points=max_points
                )
            )
            for r in configs
        }
    placed = {r: aligned(drawn[r], align, counters.get(r)) for r in configs}
    unplaced = [names[r] for r in ordered if drawn[r] and not placed[r]]
    why = f"no {counter} logged" if align == "samples" else "no wall times"
    if unplaced:
        note += f" — not drawn ({why}): {', '.join(unplaced)}"
    axis = AXIS_TITLES[align] if align != "samples" else f"{counter} (samples seen)"
    ref = ordered[0]
    if mode == "diff" and len(ordered) > 1:
        return difference_figure(
            (names[ref], placed[ref]),
            [(names[r], placed[r]) for r in ordered[1:]],
            title=f"{named(metric)}: difference to reference, by {ALIGNS[align]}{note}",
            divergence={names[r]: x_at_step(placed[r], divergence[names[r]]) for r in ordered[1:]},
            x_key="x",
            x_title=axis,
        )
    return series_figure(
        [(names[r], placed[r]) for r in ordered],
        title=f"{named(metric)}, by {ALIGNS[align]}{note}",
        log_y=scale.log if (scale := signal_views.SCALES.get(metric)) else metric in LOG_SCALE,
        height=380,
        x_axis="aligned",
        x_title=axis,
    )
