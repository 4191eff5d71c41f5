"""The dashboard's URL scheme, written once: its pages own these paths and read these query
parameters, and everything that links into it (alert deep links, the demo's summary) builds the
link here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

RUNS = "/"
RUN = "/run"
COMPARE = "/compare"
BUCKETS = "/buckets"
HARDWARE = "/hardware"
PARITY = "/parity"
ACTIVITY = "/activity"
ALERTS = "/alerts"
INCIDENT = "/incident"
RULES = "/rules"


def query_string(state: Mapping[str, object]) -> str:
    """`?k=v&…` for a view's state; empty values are left out, lists are comma-joined."""
    clean = {k: v for k, v in state.items() if v not in (None, "", [], ())}
    flat = {
        k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        for k, v in clean.items()
    }
    return "?" + urlencode(flat) if flat else ""


def window(step: int | None, span: int) -> dict[str, int]:
    """The `step_min`/`step_max` parameters of a view zoomed to `span` steps either side of
    `step` (none when no step is given)."""
    return {} if step is None else {"step_min": max(0, step - span), "step_max": step + span}


def run_view(
    run_id: str,
    *,
    project: str | None = None,
    metric: str | None = None,
    step: int | None = None,
    span: int = 50,
) -> str:
    """The run page (of `project`'s run, run ids being per project), zoomed to `span` steps
    either side of `step` when one is given."""
    state = {"run": run_id, "project": project, "metric": metric, **window(step, span)}
    return RUN + query_string(state)


def compare_view(
    runs: Sequence[str],
    *,
    reference: str | None = None,
    metric: str | None = None,
    step: int | None = None,
    span: int = 50,
) -> str:
    """The compare page for `runs` against `reference` (the first run when not given), zoomed to
    `span` steps either side of `step` when one is given."""
    ref = reference or (runs[0] if runs else None)
    state = {"runs": list(runs), "ref": ref, "metric": metric, **window(step, span)}
    return COMPARE + query_string(state)


def parity_view(reports: Sequence[str], *, step: int | None = None) -> str:
    """The parity page with `reports` (parity-report run ids) overlaid, at phase `step`."""
    return PARITY + query_string({"runs": list(reports), "step": step})


def absolute(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def hardware_view(
    *,
    runs: Sequence[str] = (),
    project: str | None = None,
    label: str | None = None,
    group_by: str | None = None,
    metric: str | None = None,
) -> str:
    """The hardware page for a selection of runs (ids, a project, a label filter), compared
    like for like on `group_by` (parity, label:KEY or config:KEY)."""
    state = {
        "runs": list(runs),
        "project": project,
        "label": label,
        "group_by": group_by,
        "metric": metric,
    }
    return HARDWARE + query_string(state)


def incident_view(incident_id: str) -> str:
    """The incident page: its alerts, timeline and actions."""
    return INCIDENT + query_string({"id": incident_id})
