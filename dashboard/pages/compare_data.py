"""The compare page's data, apart from its layout: each run's config and series (one read
serves the overlay and the divergence search), and where each run leaves the reference.
Plain functions over the read port, tested without a browser."""

from __future__ import annotations

from collections.abc import Sequence

from server.domain import signals
from server.domain.reads.runs import RunConfig
from server.domain.reads.scope import ReadScope
from server.domain.series import bucket_value, has_nonfinite
from server.figures.analysis import first_divergence
from server.figures.points import Point, points
from server.figures.scale import scaled
from server.services.reads.port import Reads

NO_DATA = "no data"


def divergences(
    drawn: dict[str, list[Point]],
    ref: str,
    names: dict[str, str],
    metric: str,
    band: tuple[float, int],
    logged: dict[str, set[str]] | None,
) -> tuple[dict[str, int | None], list[dict[str, str | int]]]:
    """Where each run leaves the reference's band (`band`: k, and N steps outside), by run
    name, and the table's rows: "never", the step, or "no data" (saying when the metric is
    not logged at all)."""
    divergence: dict[str, int | None] = {}
    rows: list[dict[str, str | int]] = []
    ref_pairs = [(p["step"], _value(p)) for p in drawn.get(ref, [])]
    for run_id, points_ in drawn.items():
        if run_id == ref:
            continue
        pairs = [(p["step"], _value(p)) for p in points_]
        if not pairs or not ref_pairs:
            lacking = run_id if not pairs else ref
            said = NO_DATA if lacking == run_id else f"{NO_DATA} in the reference"
            if logged is not None and metric and metric not in logged.get(lacking, {metric}):
                said += f" (no {metric} logged)"
            rows.append({"run": names[run_id], "step": said})
            continue
        step = first_divergence(ref_pairs, pairs, k=band[0], sustain=band[1])
        divergence[names[run_id]] = step
        rows.append({"run": names[run_id], "step": _verdict(step, ref_pairs, pairs, band[1])})
    return divergence, rows


def read_through(metric: str, logged: dict[str, set[str]]) -> dict[str, signals.Signal]:
    """For a family (`signals.VLLM_KL`), the member each run is drawn through: its strongest
    (runs that log none are left out); nothing for a plain metric."""
    if not signals.is_family(metric):
        return {}
    found = {r: signals.strongest(metric, names) for r, names in logged.items()}
    return {r: s for r, s in found.items() if s is not None}


def fetch(
    reads: Reads,
    scope: ReadScope,
    run_ids: list[str],
    metric: str,
    step_min: int | None = None,
    step_max: int | None = None,
    max_points: int = 2000,
    through: dict[str, signals.Signal] | None = None,
) -> tuple[dict[str, RunConfig], dict[str, list[Point]], list[str]]:
    """The page's data: each run's name and config, its series at `max_points` step buckets over
    [step_min, step_max] (one fetch serves both the overlay and the divergence search), and the
    runs drawn from rollups only (retention dropped their raw values). For a family, each run's
    series is its own member's (`through`, see `read_through`) on the family's common scale."""
    configs = {c.id: c for c in reads.runs.run_configs(scope, run_ids)}
    family = signals.is_family(metric)
    through = through or {}
    found = {
        r: reads.series.series(
            scope,
            r,
            through[r].metric if family else metric,
            step_min=step_min,
            step_max=step_max,
            max_points=max_points,
        )
        for r in configs
        if not family or r in through
    }
    drawn = {
        r: scaled(points(series), through[r]) if family else points(series)
        for r, series in found.items()
    }
    drawn |= {r: [] for r in configs if r not in drawn}
    coarse = [r for r, series in found.items() if series.rollup_only]
    return configs, drawn, coarse


def _value(point: Point) -> float:
    """A bucket that held any NaN or ±Inf counts as outside the reference band."""
    return float("nan") if has_nonfinite(point) else bucket_value(point)


def _verdict(
    step: int | None, ref: Sequence[tuple[int, float]], run: Sequence[tuple[int, float]], n: int
) -> int | str:
    """The divergence step, or why there is none: "never" only when the runs share enough
    steps for N in a row to have been possible; fewer say how many they share."""
    if step is not None:
        return step
    shared = len({s for s, _ in ref} & {s for s, _ in run})
    return "never" if shared >= n else f"not decidable: {shared} shared steps, {n} needed"
