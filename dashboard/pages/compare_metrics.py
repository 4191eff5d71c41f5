"""The compare page's metric: which one it opens on, what its menu offers, and what the page
says about it, from each chosen run's metric names.

It opens on the strongest mismatch signal every chosen run logs (`metrics.compare_metric`),
whatever their trainers call it; runs that log the gap under different formulas (TRL's mean
|logp diff| beside verl's k3) open on their family's common scale, each run's own signal one
click away. The menu lists every metric any of them logs under the names they log it; runs
that share no mismatch signal are told so, with the one each logs.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc
from dash.development.base_component import Component

from dashboard import ids
from dashboard.access import Reader
from server.domain import signal_views, signals, urls
from server.domain.metrics import compare_metric, compare_options
from server.domain.reads.scope import ReadScope
from server.errors import MonitorError
from server.services.reads.port import Reads


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.CMP_METRIC, "options"),
        Output(ids.CMP_METRIC, "value"),
        Input(ids.CMP_RUNS, "value"),
        State(ids.CMP_METRIC, "value"),
        prevent_initial_call=True,  # the layout sets both from the URL and the runs
    )
    def metrics(chosen: list[str] | None, current: str | None) -> Any:
        """Another selection: every metric its runs log; the metric drawn stays when all of
        them log it, else the strongest signal they share."""
        found = logged(reads, reader(), chosen or [])
        keep = current if current and all(current in m for m in found.values()) else None
        return menu(found, keep)


def logged(reads: Reads, scope: ReadScope, run_ids: list[str]) -> dict[str, set[str]]:
    """Each run's metric names (runs that cannot be read are left out)."""
    out = {}
    for run_id in run_ids:
        try:
            out[run_id] = {m.name for m in reads.runs.list_metrics(scope, run_id)}
        except MonitorError:
            continue
    return out


def menu(logged: dict[str, set[str]], current: str | None) -> tuple[list[Any], Any]:
    """(options, value) of the metric menu: every metric the runs log (signals labelled with
    their name), opening on `current` when one was asked for, else on `compare_metric`."""
    names = compare_options(logged.values())
    if current and current not in names:
        names.append(current)  # asked for by a link: kept, and its absence is said
    options = [{"label": _option_label(m), "value": m} for m in names]
    return options, current or compare_metric(logged.values())


def _option_label(metric: str) -> str:
    scale = signal_views.SCALES.get(metric)
    if scale is not None:
        return f"{scale.label} · each run's own signal on the {scale.unit} scale"
    signal = signals.BY_METRIC.get(metric)
    return metric if signal is None else f"{metric} · {signal.label}"


def own_words(metrics: set[str]) -> str:
    """What a run logs of the gap, in words: its headline signal, else a measure no alarm
    reads, else that it logs none."""
    head = signals.headline(metrics)
    if head is not None:
        return f"{head.metric} ({head.label})"
    other = signal_views.measure(metrics)
    if other is not None:
        return f"{other} ({signal_views.MEASURES[other]}), which no alarm reads"
    return "no mismatch signal"


def note(
    metric: str | None, logged: dict[str, set[str]], names: dict[str, str]
) -> list[str | Component]:
    """In words: what the drawn metric is, which runs lack it, and when the runs share no
    mismatch signal, which each one logs; on a family's scale, how each run's own signal was
    converted, with a link to each run's own metric on its page."""
    if not logged:
        return []
    if metric and signals.is_family(metric):
        return _family_note(metric, logged, names)
    parts = []
    shared = set.intersection(*logged.values())
    if not any(signals.headline(m) for m in logged.values()):
        parts.append(
            "None of these runs logs a signal the alarms read; to get one, "
            f"{signal_views.HOW_TO_LOG}."
        )
    elif signals.headline(shared) is None and len(logged) > 1:
        own = "; ".join(f"{names.get(r, r)} logs {own_words(m)}" for r, m in logged.items())
        parts.append(f"These runs share no mismatch signal: {own}.")
        if any(signals.headline(m) is None for m in logged.values()):
            parts.append(f"To give a run one, {signal_views.HOW_TO_LOG}.")
    if metric:
        if metric in signals.BY_METRIC:
            parts.append(f"Drawn: {metric} — {signals.describe(metric)}.")
        elif metric in signal_views.MEASURES:
            parts.append(
                f"Drawn: {metric} — {signal_views.MEASURES[metric]}: a measure of the gap that no "
                "alarm reads, with no common scale."
            )
        lacking = [names.get(r, r) for r, metrics in logged.items() if metric not in metrics]
        if lacking:
            parts.append(f"No {metric} in: {', '.join(lacking)}.")
    return [" ".join(parts)] if parts else []


def _family_note(
    family: str, logged: dict[str, set[str]], names: dict[str, str]
) -> list[str | Component]:
    scale = signal_views.SCALES[family]
    out: list[str | Component] = [
        f"Drawn on the {scale.label} family's common scale ({scale.unit}), the one the alarms "
        "judge: each run's own signal converted. "
    ]
    lacking = []
    for run_id, metrics in logged.items():
        own = signals.strongest(family, metrics)
        name = names.get(run_id, run_id)
        if own is None:
            lacking.append(name)
            continue
        out += [
            f"{name}: {own.label} ({own.metric}) {signal_views.on_scale(own)} — ",
            dcc.Link(
                f"its own {own.metric}",
                href=urls.run_view(run_id, metric=own.metric),
                className="own-metric",
            ),
            ". ",
        ]
    if lacking:
        out.append(
            f"No {scale.label} signal in: {', '.join(lacking)}; to give a run one, "
            f"{signal_views.HOW_TO_LOG}."
        )
    return out
