"""The run page's read-model: everything one redraw of it draws, read in one call.

Which panels a run page draws follows from the metrics the run logs (`panels_for`); the
service reads those panels' series, the run's annotations and GPU segments and its alert
markers with them, so a redraw — a zoom, a live tick that found a new step, a control changed —
is one read, never one per part of the page.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from server.domain import signals
from server.domain.alarms import Alert
from server.domain.metrics import Panel, run_panels
from server.domain.reads.runs import Annotation, GpuSegment
from server.domain.reads.series import Series


def panels_for(available: Collection[str], extra: Sequence[str]) -> list[Panel]:
    """The run page's panels: the run's mismatch signals first, then every canonical panel it
    has data for (`run_panels`), then one panel per extra metric asked for (a mismatch signal
    titled with its name and meaning)."""
    chosen = run_panels(available)
    known = {m for panel in chosen for m in panel.metrics}
    for m in extra:
        if m in available and m not in known:
            signal = signals.BY_METRIC.get(m)
            chosen.append(
                Panel(m, (m,)) if signal is None else Panel(m, (m,), signal.label, signal.meaning)
            )
            known.add(m)
    return chosen


@dataclass(frozen=True)
class RunView:
    """One redraw of a run page: its panels with their series (a metric the run lacks is left
    out of `series`), the run's last step when read (read first: a step landing meanwhile is
    drawn by the next tick), its annotations and GPU segments, and its alerts to mark."""

    run_id: str
    last_step: int | None
    metrics: tuple[str, ...]  # every metric the run logs, for the page's menu
    panels: tuple[Panel, ...]
    series: Mapping[str, Series]
    annotations: tuple[Annotation, ...]
    gpu_segments: tuple[GpuSegment, ...]
    alerts: tuple[Alert, ...]
