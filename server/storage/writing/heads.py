"""Heads kept at ingest: per series (count, first and last step, last value and time, counts of
NaN and ±Inf) and per actor (contiguous GPU segments), so that run summaries, the runs list and
`/metrics` never read values or step records.

Both are updated from what a group of batches newly stored, in the group's transaction: a head
is exactly what a full scan of the stored values would compute (a test keeps that true).

The read side here picks each run's headline mismatch signal (`signals.headline`) from the
metric names its trainer heads have, in SQL, so the runs list can sort by it and `/metrics`
export it without reading a value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain import signals
from server.domain.records import RecordKey
from server.storage.schema import tables as t
from server.storage.writing.point_columns import Points

HEADLINE_ORDER: tuple[str, ...] = tuple(
    metric for family in signals.GAP_FAMILIES for metric in signals.members(family)
)
"""Every signal in the order `signals.headline` prefers them: the first a run logs is its
headline."""

_SERIES_HEADS = sa.text(
    "UPDATE series SET points = series.points + v.n, "
    "first_step = CASE WHEN series.first_step IS NULL OR v.first_step < series.first_step "
    "  THEN v.first_step ELSE series.first_step END, "
    "first_time = CASE WHEN series.first_time IS NULL OR v.first_time < series.first_time "
    "  THEN v.first_time ELSE series.first_time END, "
    "last_value = CASE WHEN series.last_step IS NULL OR v.last_step > series.last_step "
    "  THEN v.last_value ELSE series.last_value END, "
    "last_step = CASE WHEN series.last_step IS NULL OR v.last_step > series.last_step "
    "  THEN v.last_step ELSE series.last_step END, "
    "last_time = CASE WHEN series.last_time IS NULL OR v.last_time > series.last_time "
    "  THEN v.last_time ELSE series.last_time END, "
    "nan = series.nan + v.nan, pos_inf = series.pos_inf + v.pos_inf, "
    "neg_inf = series.neg_inf + v.neg_inf "
    "FROM (SELECT unnest(CAST(:ids AS BIGINT[])) AS id, unnest(CAST(:n AS BIGINT[])) AS n, "
    "unnest(CAST(:first_step AS BIGINT[])) AS first_step, "
    "unnest(CAST(:last_step AS BIGINT[])) AS last_step, "
    "unnest(CAST(:last_value AS DOUBLE PRECISION[])) AS last_value, "
    "unnest(CAST(:first_time AS DOUBLE PRECISION[])) AS first_time, "
    "unnest(CAST(:last_time AS DOUBLE PRECISION[])) AS last_time, "
    "unnest(CAST(:nan AS BIGINT[])) AS nan, unnest(CAST(:pos_inf AS BIGINT[])) AS pos_inf, "
    "unnest(CAST(:neg_inf AS BIGINT[])) AS neg_inf) AS v WHERE series.id = v.id"
)


FOLD_ROWS = 1 << 16
"""Values folded into the heads at a time: their steps and times are spelled out only for
that many at once."""


def update_series(conn: Connection, points: Points) -> None:
    """Fold newly stored values into their series' heads, in one statement. Each value's
    series is a slot and its step a record (`Points`), so every figure is a fold by slot, taken
    `FOLD_ROWS` values at a time: no sorted copy of the columns, nothing spelled out per value
    beyond one stretch."""
    if not len(points):
        return
    k = len(points.series)
    first_step = np.full(k, np.iinfo(np.int64).max)
    last_step = np.full(k, np.iinfo(np.int64).min)
    last_value = np.full(k, np.nan)
    first_time = np.full(k, np.inf)
    last_time = np.full(k, -np.inf)
    counts = np.zeros((4, k), dtype=np.int64)  # values, NaN, +Inf, -Inf
    for at in range(0, len(points), FOLD_ROWS):
        part = slice(at, at + FOLD_ROWS)
        slots, values, records = points.slots[part], points.values[part], points.records[part]
        steps, times = points.steps[records], points.times[records]
        np.minimum.at(first_step, slots, steps)
        np.minimum.at(first_time, slots, times)
        np.maximum.at(last_time, slots, times)
        last = np.full(k, np.iinfo(np.int64).min)
        np.maximum.at(last, slots, steps)
        at_last = steps == last[slots]  # one value per series and step: the series' last
        value_at_last = np.full(k, np.nan)
        value_at_last[slots[at_last]] = values[at_last]
        later = last > last_step
        last_value[later] = value_at_last[later]
        np.maximum(last_step, last, out=last_step)
        for row, flags in enumerate((None, np.isnan(values), values == np.inf, values == -np.inf)):
            chosen = slots if flags is None else slots[flags]
            counts[row] += np.bincount(chosen, minlength=k)
    conn.execute(
        _SERIES_HEADS,
        {
            "ids": points.series.tolist(),
            "n": counts[0].tolist(),
            "first_step": first_step.tolist(),
            "last_step": last_step.tolist(),
            "last_value": last_value.tolist(),
            "first_time": first_time.tolist(),
            "last_time": last_time.tolist(),
            "nan": counts[1].tolist(),
            "pos_inf": counts[2].tolist(),
            "neg_inf": counts[3].tolist(),
        },
    )


@dataclass
class _Segment:
    seq: int
    gpu: str | None
    first_step: int
    last_step: int
    steps: int
    first_time: float
    last_time: float
    stored: bool  # already a row (update it) or new (insert it)


def update_actors(conn: Connection, records: Sequence[tuple[RecordKey, float, str | None]]) -> None:
    """Fold newly stored step records (key, time, GPU) into their actors' GPU segments.

    A new segment starts where a known GPU name differs from the last known one; a record with
    no GPU name continues the segment it falls in (and names it, if it had no name yet)."""
    by_actor: dict[tuple[int, str, str], list[tuple[int, float, str | None]]] = {}
    for (run_pk, source, actor, step), time, gpu in records:
        by_actor.setdefault((run_pk, source, actor), []).append((step, time, gpu))
    if not by_actor:
        return
    current = _last_segments(conn, list(by_actor))
    changed: list[tuple[tuple[int, str, str], _Segment]] = []
    for key, rows in by_actor.items():
        seg = current.get(key)
        for step, time, gpu in sorted(rows):
            if seg is None or (gpu is not None and seg.gpu is not None and gpu != seg.gpu):
                if seg is not None:
                    changed.append((key, seg))
                seg = _Segment(
                    0 if seg is None else seg.seq + 1, gpu, step, step, 0, time, time, stored=False
                )
            seg.gpu = seg.gpu or gpu
            seg.first_step, seg.last_step = min(seg.first_step, step), max(seg.last_step, step)
            seg.first_time, seg.last_time = min(seg.first_time, time), max(seg.last_time, time)
            seg.steps += 1
        if seg is not None:
            changed.append((key, seg))
    _write_segments(conn, changed)


def _last_segments(
    conn: Connection, keys: list[tuple[int, str, str]]
) -> dict[tuple[int, str, str], _Segment]:
    a = t.actors.c
    rows = conn.execute(
        sa.select(t.actors).where(a.run_pk.in_(sorted({k[0] for k in keys}))).order_by(a.seq)
    ).all()
    wanted = set(keys)
    out: dict[tuple[int, str, str], _Segment] = {}
    for r in rows:
        key = (r.run_pk, r.source, r.actor)
        if key in wanted:  # the highest seq wins: rows come ordered by it
            out[key] = _Segment(
                r.seq,
                r.gpu,
                r.first_step,
                r.last_step,
                r.steps,
                r.first_time,
                r.last_time,
                stored=True,
            )
    return out


def _write_segments(conn: Connection, changed: list[tuple[tuple[int, str, str], _Segment]]) -> None:
    a = t.actors.c
    for (run_pk, source, actor), seg in changed:
        values = {
            "gpu": seg.gpu,
            "first_step": seg.first_step,
            "last_step": seg.last_step,
            "steps": seg.steps,
            "first_time": seg.first_time,
            "last_time": seg.last_time,
        }
        if seg.stored:
            conn.execute(
                sa.update(t.actors)
                .where(a.run_pk == run_pk, a.source == source, a.actor == actor, a.seq == seg.seq)
                .values(**values)
            )
        else:
            conn.execute(
                sa.insert(t.actors).values(
                    run_pk=run_pk, source=source, actor=actor, seq=seg.seq, **values
                )
            )


def _on_family_scale(metric: Any, value: Any) -> Any:
    """The value on the vllm-kl family's (k3) scale, as `Signal.to_scale` computes it; NULL for a
    ratio-drift signal, whose scale is not comparable with a KL."""
    square = {"square": value * value, "excess_square": (value - 1.0) * (value - 1.0)}
    whens = []
    for signal in signals.SIGNALS:
        if signal.family != signals.VLLM_KL:
            continue
        if signal.conversion in square:
            scaled = signals.ABS_D_TO_K3 * square[signal.conversion]
        elif signal.conversion == "magnitude":
            scaled = sa.func.abs(value)
        else:
            scaled = value
        whens.append((metric == signal.metric, scaled))
    return sa.case(*whens, else_=sa.null())


def headline_heads(run_pks: Sequence[int] | None = None) -> Any:
    """Per run (`run_pk`), from its trainer heads: the headline signal it logs (`metric`), that
    series' latest value (`value`, the highest over the trainer's actors) and that value on the
    vllm-kl family's k3 scale (`k3`; NULL where the headline is a ratio-drift signal). A
    subquery for the runs list's join (of the runs in `run_pks` when given); it reads heads
    only."""
    s = t.series.c
    where = [s.metric.in_(HEADLINE_ORDER), s.source == "trainer", s.points > 0]
    if run_pks is not None:
        where.append(s.run_pk.in_(list(run_pks)))
    per_metric = (
        sa.select(s.run_pk, s.metric, sa.func.max(s.last_value).label("value"))
        .where(*where)
        .group_by(s.run_pk, s.metric)
        .subquery("signal_heads")
    )
    h = per_metric.c
    rank = sa.case({m: i for i, m in enumerate(HEADLINE_ORDER)}, value=h.metric)
    first = sa.func.row_number().over(partition_by=h.run_pk, order_by=rank)
    ranked = sa.select(h.run_pk, h.metric, h.value, first.label("n")).subquery("ranked_heads")
    r = ranked.c
    return (
        sa.select(
            r.run_pk,
            r.metric.label("metric"),
            r.value.label("value"),
            _on_family_scale(r.metric, r.value).label("k3"),
        )
        .where(r.n == 1)
        .subquery("headline_heads")
    )


@dataclass(frozen=True)
class SummaryHeads:
    """What run summaries show of their runs' series, from one read of the heads."""

    latest: dict[int, dict[str, float]]  # per run: the value at the last step of each metric
    headlines: dict[int, tuple[str, float]]  # per run: (headline metric, its latest value)


def summary_heads(conn: Connection, run_pks: Sequence[int], latest: Sequence[str]) -> SummaryHeads:
    """The latest value of each of the `latest` metrics per run (the trainer's when it has one,
    else the actor that reported last) and each run's headline (as `headline_heads` picks it in
    SQL for the runs list's sort and `/metrics`: the first of `HEADLINE_ORDER` its trainer logs,
    the highest latest value over the trainer's actors, NaN above every number as the databases
    order it), in one read of the heads."""
    if not run_pks:
        return SummaryHeads({}, {})
    s = t.series.c
    names = sorted({*latest, *HEADLINE_ORDER})
    query = (
        sa.select(s.run_pk, s.metric, s.source, s.last_step, s.last_value)
        .where(s.run_pk.in_(list(run_pks)), s.metric.in_(names), s.points > 0)
        .order_by(s.run_pk, s.metric, (s.source == "trainer").desc(), s.last_step.desc())
    )
    wanted = set(latest)
    values: dict[int, dict[str, float]] = {}
    trainer: dict[int, dict[str, float]] = {}
    for row in conn.execute(query):
        if row.last_value is None:
            continue
        value = float(row.last_value)
        if row.metric in wanted:
            values.setdefault(row.run_pk, {}).setdefault(row.metric, value)
        if row.source == "trainer" and row.metric in _RANK:
            heads = trainer.setdefault(row.run_pk, {})
            seen = heads.get(row.metric)
            heads[row.metric] = value if seen is None else _highest(seen, value)
    return SummaryHeads(
        values,
        {pk: min(heads.items(), key=lambda item: _RANK[item[0]]) for pk, heads in trainer.items()},
    )


_RANK = {metric: i for i, metric in enumerate(HEADLINE_ORDER)}


def _highest(a: float, b: float) -> float:
    """max as SQL's MAX orders doubles: NaN above every number."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b)


def logged_signals(conn: Connection, run_pks: Sequence[int]) -> dict[int, set[str]]:
    """Per run: the mismatch signals its trainer heads hold (runs with none are left out)."""
    if not run_pks:
        return {}
    s = t.series.c
    query = (
        sa.select(s.run_pk, s.metric)
        .where(
            s.run_pk.in_(list(run_pks)),
            s.metric.in_(HEADLINE_ORDER),
            s.source == "trainer",
            s.points > 0,
        )
        .distinct()
    )
    out: dict[int, set[str]] = {}
    for row in conn.execute(query):
        out.setdefault(int(row.run_pk), set()).add(row.metric)
    return out
