"""A run's mismatch attribution: the reads behind `server.analysis.attribution`, and its answer
as a read-model (`server.domain.reads.attribution`).

Everything is read through the read side, so access and a missing run answer as for any read
of a run (404), and a long run is read as at most `MAX_POINTS` step buckets (a bucket's mean
stands for its steps; the weight version is a bucket's last). The GPU contrast comes from the
like-for-like hardware comparison of the run's project, when one of its groups holds the run and
spans another GPU type; a comparison that cannot be made leaves the check not run. With a
database at hand, the project's reference run (`mismatch project reference`) sets the healthy
level beside the field's bound: its median of the same signal.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from server.analysis.attribution import Attribution, Hypothesis, Trace, attribute
from server.analysis.attribution_checks import Bucket, GpuContrast, Reference
from server.deadlines import Deadline
from server.domain import parity, signals
from server.domain.reads import attribution as read
from server.domain.reads.hardware import HardwareComparison
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import Series
from server.errors import MonitorError, Unavailable
from server.services.reads.hardware import HardwareReads
from server.services.reads.runs import RunReads
from server.services.reads.series import SeriesReads, check_range
from server.storage.db import Database
from server.storage.reading import references, runs, stored_steps

MAX_POINTS = 2000
"""Step buckets read per series: the checks need a shape (signs, medians, ranks), not every
step, and 2,000 keeps a million-step run's read small."""
N_BOOT = 200
"""Bootstrap resamples of the GPU contrast: its interval only has to clear 1 or not."""
CONTEXT: tuple[str, ...] = ("k3_kl", "k1_kl", "lag", "weight_version", "prefix_cache_hit_rate")
CONTEXT += ("rollout_clip_rate", "mis_token_rate", "tis_token_rate", "k3_kl_p99")
LAST = frozenset({"weight_version"})  # read as a bucket's last value, not its mean


def _values(series: Series) -> dict[int, float]:
    use_last = series.metric in LAST
    out: dict[int, float] = {}
    for point in series.points:
        value = point.last if use_last or point.mean is None else point.mean
        if value is not None and math.isfinite(value):
            out[point.step] = value
    return out


def _contrast(
    comparison: HardwareComparison, run_id: str, gpus: Sequence[str]
) -> GpuContrast | None:
    """The pair of the run's group that sets its GPU type furthest above another's."""
    best: GpuContrast | None = None
    for group in comparison.groups:
        if run_id not in group.run_ids:
            continue
        for pair in group.pairs:
            if None in (pair.ratio, pair.ci_low, pair.ci_high):
                continue
            ratio, low, high = (
                float(pair.ratio or 0),
                float(pair.ci_low or 0),
                float(pair.ci_high or 0),
            )
            if pair.a in gpus:
                found = GpuContrast(pair.a, pair.b, ratio, low, high)
            elif pair.b in gpus and low > 0 and ratio > 0:
                found = GpuContrast(pair.b, pair.a, 1 / ratio, 1 / high, 1 / low)
            else:
                continue
            if best is None or found.ci_low > best.ci_low:
                best = found
    return best


def first_steps(
    db: Database, run_id: str, project: str, step_min: int | None, step_max: int | None
) -> dict[int, float]:
    """{first step: weight version} of each weight version the run's records carry (the
    `weight_version` of `log_metrics`): one row per version, however long the run."""
    with db.read() as conn:
        found = runs.row(conn, run_id, [project])
        if not found:
            return {}
        return stored_steps.weight_versions(conn, found[0].pk, step_min, step_max)


def _onto_buckets(versions: dict[int, float], signal: Series | None) -> dict[int, float]:
    """Version changes keyed by the first step of the signal's bucket that holds them, when a
    long run was read in step buckets: the update checks compare buckets then."""
    if signal is None or not signal.downsampled:
        return versions
    spans = [(p.step, p.step_end) for p in signal.points]
    starts = [lo for lo, _ in spans]
    out: dict[int, float] = {}
    for step, version in sorted(versions.items()):
        i = bisect.bisect_right(starts, step) - 1
        inside = i >= 0 and spans[i][0] <= step <= spans[i][1]
        out[spans[i][0] if inside else step] = version
    return out


class AttributionReads:
    """Reads through the runs, series and hardware read services; `db`, when given, adds the
    weight versions the run's records carry, for runs that log them with their records rather
    than as a `weight_version` metric."""

    def __init__(
        self,
        runs: RunReads,
        series: SeriesReads,
        hardware: HardwareReads,
        db: Database | None = None,
    ) -> None:
        self._runs = runs
        self._series = series
        self._hardware = hardware
        self._db = db

    @classmethod
    def over(cls, db: Database) -> AttributionReads:
        """The service over a database, with read services of its own."""
        return cls(RunReads(db), SeriesReads(db), HardwareReads(db), db)

    def attribution(
        self,
        scope: ReadScope,
        run_id: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        deadline: Deadline | None = None,
        gpu: bool = True,
    ) -> read.RunAttribution:
        """The checks and ranked hypotheses of one run over a step range (see module); `gpu`
        False skips the GPU contrast (a project-wide bootstrap), as an alert's diagnosis does."""
        check_range(step_min, step_max, 1)
        deadline = deadline or Deadline.unbounded()
        detail = self._runs.get_run(scope, run_id)
        present = {m.name for m in self._runs.list_metrics(scope, run_id)}
        headline = signals.headline(present)
        wanted = [m for m in dict.fromkeys(_signal_names(headline) + list(CONTEXT)) if m in present]
        deadline.check()
        found = (
            self._series.run_series(
                scope, run_id, wanted, step_min=step_min, step_max=step_max, max_points=MAX_POINTS
            )
            if wanted
            else {}
        )
        deadline.check()
        rows = self._series.buckets(scope, [run_id], step_min=step_min, step_max=step_max)
        buckets = [Bucket(r.lo, r.hi, r.tokens, r.sum_k3) for r in rows if r.group == "all"]
        contrast = (
            self._gpu(scope, run_id, detail.project, headline, detail.gpus, deadline)
            if gpu
            else None
        )
        values = {metric: _values(s) for metric, s in found.items()}
        if "weight_version" not in values and self._db is not None:
            versions = first_steps(self._db, run_id, detail.project, step_min, step_max)
            signal = found.get(headline.metric) if headline is not None else None
            values["weight_version"] = _onto_buckets(versions, signal)
        trace = Trace(
            headline.metric if headline is not None else None,
            values,
            buckets,
            parity.flatten(detail.config),
            contrast,
            self._reference(scope, run_id, detail.project, headline),
        )
        result = attribute(trace)
        return _out(result, run_id, detail.project, step_min, step_max)

    def _reference(
        self,
        scope: ReadScope,
        run_id: str,
        project: str,
        headline: signals.Signal | None,
    ) -> Reference | None:
        """The project's reference run and its median of the headline signal (None without a
        database, a reference, that signal in it, or when the run is its own reference)."""
        if self._db is None or headline is None:
            return None
        with self._db.read() as conn:
            found = references.get(conn, project)
        if found is None or found[0] == run_id:
            return None
        try:
            read = self._series.run_series(
                scope, found[0], [headline.metric], max_points=MAX_POINTS
            )
        except MonitorError:  # the reference run is gone, or out of reach
            return None
        series = read.get(headline.metric)
        values = [headline.to_scale(v) for v in _values(series).values()] if series else []
        return Reference(found[0], float(np.median(values))) if values else None

    def _gpu(
        self,
        scope: ReadScope,
        run_id: str,
        project: str,
        headline: signals.Signal | None,
        gpus: Sequence[str],
        deadline: Deadline,
    ) -> GpuContrast | None:
        if headline is None or not gpus:
            return None
        try:
            comparison = self._hardware.comparison(
                scope, metric=headline.metric, project=project, n_boot=N_BOOT, deadline=deadline
            )
        except Unavailable:  # the deadline passed: not a missing contrast
            raise
        except MonitorError:  # no comparison to make (too many GPU types, no values)
            return None
        return _contrast(comparison, run_id, gpus)


def _signal_names(headline: signals.Signal | None) -> list[str]:
    """The headline and the strongest ratio-drift member (the offset check's fallback)."""
    names = [headline.metric] if headline is not None else []
    return names + [m for m in signals.MEMBERS[signals.RATIO]]


def _hypothesis(h: Hypothesis) -> read.Hypothesis:
    notes = tuple(read.ConfigNote(n.key, n.value, n.effect, n.why) for n in h.config)
    return read.Hypothesis(h.mode, h.title, h.score, h.evidence, notes)


def _out(
    result: Attribution, run_id: str, project: str, step_min: int | None, step_max: int | None
) -> read.RunAttribution:
    return read.RunAttribution(
        run_id=run_id,
        project=project,
        signal=result.signal,
        step_min=step_min,
        step_max=step_max,
        steps=result.steps,
        hypotheses=tuple(_hypothesis(h) for h in result.hypotheses),
        checks=tuple(
            read.Check(c.name, c.figure, c.threshold, c.passed, c.sentence) for c in result.checks
        ),
        missing=result.missing,
    )


def cause_line(found: read.RunAttribution) -> str:
    """The likeliest cause in one line, for a notification: its title, score and first piece
    of evidence; without a signal to read, what is missing instead of a cause."""
    if found.missing is not None:
        return f"No likely cause: {found.missing}"
    top = found.top
    evidence = f": {top.evidence[0]}" if top.evidence else ""
    return f"Likely cause: {top.title} (score {top.score:.2f}){evidence}"
