"""The compare page's metric: which one it opens on, what its menu offers, and what the page
says about it, from each chosen run's metric names.

It opens on the strongest mismatch signal every chosen run logs (`metrics.compare_metric`),
whatever their trainers call it, and the menu lists every metric any of them logs under the
names they log it; runs that share no mismatch signal are told so, with the one each logs.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State

from dashboard import ids
from dashboard.access import Reader
from server.domain import signals
from server.domain.metrics import compare_metric, compare_options
from server.domain.reads.scope import ReadScope
from server.errors import MonitorError
from server.services.reads import Reads


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
    signal = signals.BY_METRIC.get(metric)
    return metric if signal is None else f"{metric} · {signal.label}"


def note(metric: str | None, logged: dict[str, set[str]], names: dict[str, str]) -> str:
    """In words: what the drawn metric is, which runs lack it, and when the runs share no
    mismatch signal, which signal each one logs."""
    if not logged:
        return ""
    parts = []
    shared_signal = signals.headline(set.intersection(*logged.values()))
    if shared_signal is None:
        own = []
        for run_id, metrics in logged.items():
            head = signals.headline(metrics)
            said = "no mismatch signal" if head is None else f"{head.metric} ({head.label})"
            own.append(f"{names.get(run_id, run_id)} logs {said}")
        parts.append("These runs share no mismatch metric: " + "; ".join(own) + ".")
    if metric:
        if metric in signals.BY_METRIC:
            parts.append(f"Drawn: {metric} — {signals.describe(metric)}.")
        lacking = [names.get(r, r) for r, metrics in logged.items() if metric not in metrics]
        if lacking:
            parts.append(f"No {metric} in: {', '.join(lacking)}.")
    return " ".join(parts)
