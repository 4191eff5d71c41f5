"""The read side's hardware reads: the pooled per-GPU distribution and the like-for-like
post-mortem (group, per-GPU figures, ratios with bootstrap intervals, runs left out).

The database does what it does well (`server.storage.reading.hardware`: which values belong to which
GPU segment, counts and sums from rollups, quantiles (of a step-window sample past
`hardware_measure.QUANTILE_VALUES` values), values thinned to the steps a
bootstrap keeps); the comparison itself is the pure `server.analysis.comparison`. What travels
to Python is a few rows per series and at most `comparison.VALUES_PER_GPU` values per GPU
type, however long the runs. Without a metric named, both read the strongest mismatch signal
the selected runs share (k3 where all log it, TRL's mean |d| ...), from their series heads.
Both answer in read-models (`server.domain.reads.hardware`), built here where the figures are;
`HardwareReads` gives them the port's shape (a `ReadScope` in), so the API and the dashboard
read them as they read everything else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from server.analysis import comparison
from server.analysis.comparison import GroupBy, Piece, RunFacts
from server.analysis.hardware import ParityPlan
from server.deadlines import Deadline
from server.domain.metrics import HEADLINE, compare_metric
from server.domain.parity import flatten
from server.domain.reads.hardware import (
    Excluded,
    GpuFigures,
    Group,
    HardwareComparison,
    HardwareRow,
    Pair,
    Setting,
)
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.reads.hardware_measure import (
    bootstrap_pieces,
    distribution,
    measure,
    with_values,
)
from server.services.reads.runs import RunReads, _label_filter
from server.storage.db import Database
from server.storage.reading import runs
from server.storage.writing import heads

MAX_RUNS = 10_000


class _HardwareFigures(RunReads):
    """The figures themselves, read with the projects given as a list; `HardwareReads` below
    gives them the port's shape."""

    def hardware(
        self,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
        projects: Sequence[str] | None = None,
    ) -> list[HardwareRow]:
        """Per GPU type, the distribution of a metric (by default the strongest mismatch signal
        the runs share) over the given runs (or a project's)."""
        with self._db.read() as conn:
            rows = self._selected(conn, run_ids, project, None, projects)
            pks = [r.pk for r in rows]
            measured = measure(conn, metric or shared_signal(conn, pks), pks)
            return distribution(self._db, conn, measured, _keys(rows))

    def hardware_comparison(
        self,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
        label: str | None = None,
        group_by: str | None = None,
        n_boot: int = comparison.N_BOOT,
        projects: Sequence[str] | None = None,
        deadline: Deadline | None = None,
    ) -> HardwareComparison:
        """The like-for-like comparison of GPU types over the selected runs (see module); a
        group spanning more than `MAX_GPU_TYPES` GPU types is refused, saying how to narrow it.
        `deadline` is checked between the reads and before each GPU type's resampling."""
        by = GroupBy.parse(group_by)
        deadline = deadline or Deadline.unbounded()
        if not 100 <= n_boot <= comparison.MAX_N_BOOT:
            raise Rejected(
                f"n_boot must be between 100 and {comparison.MAX_N_BOOT} resamples, got {n_boot}"
            )
        with self._db.read() as conn:
            rows = self._selected(conn, run_ids, project, label, projects)
            keys = _keys(rows)
            pks = {key: pk for pk, key in keys.items()}
            metric = metric or shared_signal(conn, list(keys))
            measured = measure(conn, metric, list(pks.values()))
            pooled = distribution(self._db, conn, measured, keys)
            facts = _facts(rows, keys, runs.configs(conn, list(pks.values())))
            deadline.check()
            valued = with_values(measured, keys)
            plan = comparison.plan(facts, valued, by)
            known = {run for run, _ in valued}
            with_any = {keys[p.run_pk] for p, st in measured.items if st.finite}
            no_gpu = sorted(with_any - known)
            no_values = sorted(set(keys.values()) - with_any)
            _check_gpu_types(plan, by)
            chosen = [] if plan.chosen is None else list(plan.chosen.run_ids)
            in_group = {pks[run_id] for run_id in chosen}
            group = measured.of_runs(in_group)
            group_rows = (
                pooled if len(in_group) == len(pks) else distribution(self._db, conn, group, keys)
            )
            pieces = bootstrap_pieces(conn, group, rows, keys)
            deadline.check()
        figures = _figures(group_rows, [p for p in pieces if p.run_id in set(chosen)])
        results = comparison.pairs(
            [p for p in pieces if p.run_id in set(chosen)],
            figures,
            metric=metric,
            n_boot=n_boot,
            deadline=deadline,
        )
        return HardwareComparison(
            pooled=tuple(pooled),
            metric=metric,
            group_by=by.text(),
            groups=()
            if plan.chosen is None
            else (_group(plan, figures, results, pieces, group_rows),),
            excluded=_excluded(plan, facts),
            note=_note(plan, len(rows), n_boot)
            + _left_out(no_gpu, NO_GPU_WHY)
            + _left_out(no_values, f"no finite value of {metric}"),
        )

    # -- helpers ----------------------------------------------------------------------------
    def _selected(
        self,
        conn: Connection,
        run_ids: Sequence[str] | None,
        project: str | None,
        label: str | None,
        projects: Sequence[str] | None,
    ) -> list[Any]:
        """The runs asked for (by id, else a project's or every readable one), narrowed to
        those whose labels match `label` (one filter semantics: the domain's)."""
        wanted = _label_filter(label)
        if run_ids:
            found = self._runs(conn, run_ids, projects)
        else:
            found = runs.rows(conn, project=project, projects=projects, limit=MAX_RUNS)
        if wanted is None:
            return found
        return [r for r in found if wanted.matches(runs.loads(r.labels, {}))]


def shared_signal(conn: Connection, run_pks: Sequence[int]) -> str:
    """What a hardware comparison reads when not told: the strongest mismatch signal every
    selected run logs (`metrics.compare_metric` over their signals), else k3_kl."""
    logged = heads.logged_signals(conn, run_pks)
    chosen = compare_metric([logged.get(pk, set()) for pk in run_pks])
    return chosen or HEADLINE


def _check_gpu_types(plan: ParityPlan, by: GroupBy) -> None:
    """Refuse a group spanning more GPU types than one comparison shows, saying how to narrow."""
    if plan.chosen is None or len(plan.chosen.gpus) <= comparison.MAX_GPU_TYPES:
        return
    gpus = plan.chosen.gpus
    most = comparison.MAX_GPU_TYPES
    shown = ", ".join(gpus[:5])
    raise Rejected(
        f"the runs compared span {len(gpus)} GPU types ({shown}, …); one comparison takes at "
        f"most {most} ({most * (most - 1) // 2} pairs): narrow the runs with label=KEY=VALUE "
        f"(e.g. a cluster or fleet label), runs=a,b,c or project=NAME, or group them with "
        f"group_by=label:KEY or config:KEY (now {by.text()})",
        detail={"reason": "too_many_gpu_types", "gpu_types": len(gpus), "max": most},
    )


def _keys(rows: Sequence[Any]) -> dict[int, str]:
    """How each run is named in the comparison: its id, or project/id where projects share an
    id (run ids are per project), so two runs are never taken for one."""
    counts = Counter(r.id for r in rows)
    shared = {run_id for run_id, n in counts.items() if n > 1}
    return {r.pk: f"{r.project}/{r.id}" if r.id in shared else r.id for r in rows}


def _facts(rows: Sequence[Any], keys: dict[int, str], configs: Sequence[Any]) -> list[RunFacts]:
    """Names, flattened configs (the parity vocabulary's flattening) and labels of the runs."""
    config = {c.pk: flatten(runs.loads(c.config, {})) for c in configs}
    return [
        RunFacts(keys[r.pk], r.name or r.id, config.get(r.pk, {}), runs.loads(r.labels, {}))
        for r in rows
    ]


def _figures(rows: Sequence[HardwareRow], pieces: Sequence[Piece]) -> list[comparison.GpuFigures]:
    """The group's per-GPU figures (from storage), for the GPU types with pieces."""
    known = {p.gpu for p in pieces}
    return [
        comparison.GpuFigures(r.gpu, r.runs, r.steps, r.nonfinite, r.median, r.p95)
        for r in rows
        if r.gpu in known
    ]


def _group(
    plan: ParityPlan,
    figures: Sequence[comparison.GpuFigures],
    results: Sequence[comparison.PairResult],
    pieces: Sequence[Piece],
    distribution: Sequence[HardwareRow],
) -> Group:
    assert plan.chosen is not None
    members = set(plan.chosen.run_ids)
    segments = {
        f.gpu: sum(1 for p in pieces if p.gpu == f.gpu and p.run_id in members) for f in figures
    }
    return Group(
        settings=tuple(Setting(key=s.key, value=s.value) for s in plan.chosen.settings),
        run_ids=tuple(plan.chosen.run_ids),
        gpus=tuple(
            GpuFigures(
                gpu=f.gpu,
                runs=f.runs,
                segments=segments[f.gpu],
                steps=f.steps,
                nonfinite=f.nonfinite,
                median=f.median,
                p95=f.p95,
            )
            for f in figures
        ),
        pairs=tuple(_pair(r) for r in results),
        distribution=tuple(d for d in distribution if d.gpu in segments),
    )


def _pair(result: comparison.PairResult) -> Pair:
    e = result.estimate
    return Pair(
        a=result.a,
        b=result.b,
        ratio=None if e is None else e.ratio,
        ci_low=None if e is None else e.lo,
        ci_high=None if e is None else e.hi,
        level=0.95 if e is None else e.level,
        runs_a=0 if e is None else e.runs_a,
        runs_b=0 if e is None else e.runs_b,
        steps_a=0 if e is None else e.steps_a,
        steps_b=0 if e is None else e.steps_b,
        sentence=result.sentence,
    )


def _excluded(plan: ParityPlan, facts: Sequence[RunFacts]) -> tuple[Excluded, ...]:
    names = {f.run_id: f.name for f in facts}
    seen: set[tuple[str, str]] = set()
    out: list[Excluded] = []
    for exclusion in plan.excluded:
        for m in exclusion.mismatches:
            if (exclusion.run_id, m.key) in seen:  # a resumed run: once, not per segment
                continue
            seen.add((exclusion.run_id, m.key))
            out.append(
                Excluded(
                    run_id=exclusion.run_id,
                    name=names.get(exclusion.run_id, exclusion.run_id),
                    gpu=exclusion.gpu,
                    setting=m.key,
                    value=m.value,
                    group_value=m.group_value,
                )
            )
    return tuple(out)


NO_KNOWN_GPU = "no known GPU type"
"""Said of runs whose records name no device: they are compared with no GPU type."""


NO_GPU_WHY = (
    f"{NO_KNOWN_GPU} (their records name no device; the collectors send the host's, or "
    "log_metrics(..., gpu=…))"
)


def _left_out(runs: Sequence[str], why: str) -> str:
    """The note's words on selected runs that no comparison could hold, and why."""
    if not runs:
        return ""
    shown = ", ".join(runs[:6]) + (f" and {len(runs) - 6} more" if len(runs) > 6 else "")
    return f" Left out, with {why}: {shown}."


def _note(plan: ParityPlan, selected: int, n_boot: int) -> str:
    if plan.chosen is None:
        return (
            f"No set of the {selected} selected runs that share their {plan.basis} settings "
            "spans two GPU types: nothing is compared like for like."
        )
    kept = len(plan.chosen.run_ids)
    return (
        f"{kept} of {selected} runs share every compared setting and differ only in GPU type; "
        f"intervals: {n_boot} block-bootstrap resamples over runs and steps."
    )


class HardwareReads:
    """The hardware reads in the port's shape: the reader's `ReadScope` in, read-models out."""

    def __init__(self, db: Database) -> None:
        self._figures = _HardwareFigures(db)

    def pooled(
        self,
        scope: ReadScope,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
    ) -> list[HardwareRow]:
        """Per GPU type, the distribution of a metric (by default the strongest mismatch
        signal the runs share) over the given runs (or a project's)."""
        return self._figures.hardware(
            metric=metric, run_ids=run_ids, project=project, projects=scope.projects
        )

    def comparison(
        self,
        scope: ReadScope,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
        label: str | None = None,
        group_by: str | None = None,
        n_boot: int = comparison.N_BOOT,
        deadline: Deadline | None = None,
    ) -> HardwareComparison:
        """The like-for-like comparison of GPU types over the selected runs (`project`'s, or
        every run in the scope when no run is named); `deadline` is checked between its reads
        and before each GPU type's resampling."""
        return self._figures.hardware_comparison(
            metric=metric,
            run_ids=run_ids,
            project=project,
            label=label,
            group_by=group_by,
            n_boot=n_boot,
            projects=scope.projects,
            deadline=deadline,
        )
