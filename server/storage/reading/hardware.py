"""Hardware reads: one metric of many runs per GPU type, computed where the values live.

A value's GPU is its actor's GPU segment at its step. Most series run on one GPU throughout: a
*piece* is a series on one GPU over a step range (the whole series, or one segment of an actor
that moved), and everything here is asked per piece:

- `pieces`: the pieces of a metric in some runs, from the series and the actor segments;
- `stats`: per piece, the counts, min, max and sum of its values. A whole series whose raw values
  are all stored reads them from its widest rollups and its hot values, a few rows per series
  whatever its length; the rest (a segment of a series, a run whose raw values retention dropped)
  from its values;
- `quantiles`: quantiles of one GPU type's finite values, an ordered-set aggregate
  (`percentile_cont`, DuckDB's `quantile_cont`) over its pieces' values, read from the index
  of (series, step) on PostgreSQL, in one statement per GPU type (a sort of that type's values,
  not of everything selected at once) — of all of them, or of the evenly spaced step windows
  `windows` keeps of a GPU type that holds more than a sample needs;
- `piece_values`: the finite values a bootstrap resamples, thinned in the database to the steps
  it keeps (multiples of a stride per piece), found by those steps.

A run whose raw values retention dropped contributes the means of its 8-step blocks in their
place (read from its level-1 rollups), as everywhere else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
ALL_STEPS = (-(2**62), 2**62)
_FINITE = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"


@dataclass(frozen=True)
class Piece:
    """One series on one GPU type over [lo, hi] (`whole`: its only segment, all of it); `gpu`
    None where the actor named none."""

    sid: int
    run_pk: int
    gpu: str | None
    lo: int
    hi: int
    whole: bool
    dropped: bool  # retention dropped its raw values: 8-step block means stand in
    first: int  # the steps it holds lie in [first, last]
    last: int
    every: int = 1  # a sample (`windows`): of each `every` steps from `first`, the first `keep`
    keep: int = 1

    def windows(self) -> list[tuple[int, int]]:
        """The step ranges it reads: [lo, hi] whole, or each window of a sample."""
        if self.every == 1:
            return [(self.lo, self.hi)]
        starts = range(self.first, self.hi + 1, self.every)
        return [(start, min(start + self.keep - 1, self.hi)) for start in starts]


@dataclass(frozen=True)
class Stats:
    """A piece's values: finite ones, the others (NaN, ±Inf), min, max and sum of the finite."""

    finite: int
    nonfinite: int
    min: float | None
    max: float | None
    sum: float


def pieces(conn: Connection, metric: str, run_pks: Sequence[int]) -> tuple[int, list[Piece]]:
    """The metric's id and its pieces in the given runs, ordered by run, GPU, series."""
    if not run_pks:
        return 0, []
    rows = conn.execute(
        sql.text(
            "SELECT s.id, s.run_pk, s.metric_id, s.raw_dropped_until, s.first_step AS head_first, "
            "s.last_step AS head_last, a.gpu, a.first_step, a.last_step, "
            "count(*) OVER (PARTITION BY s.id) AS n FROM series s "
            "LEFT JOIN actors a ON a.run_pk = s.run_pk AND a.source = s.source "
            "AND a.actor = s.actor WHERE s.metric = :metric AND s.run_pk IN :run_pks "
            "ORDER BY s.run_pk, s.id, a.seq",
            "run_pks",
        ),
        {"metric": metric, "run_pks": list(run_pks)},
    ).all()
    if not rows:
        return 0, []
    out = [
        Piece(
            sid=int(r.id),
            run_pk=int(r.run_pk),
            gpu=r.gpu or None,
            lo=ALL_STEPS[0] if r.n == 1 else int(r.first_step),
            hi=ALL_STEPS[1] if r.n == 1 else int(r.last_step),
            whole=r.n == 1,
            dropped=r.raw_dropped_until is not None,
            first=int(r.head_first if r.n == 1 or r.first_step is None else r.first_step),
            last=int(r.head_last if r.n == 1 or r.last_step is None else r.last_step),
        )
        for r in rows
        if r.head_first is not None  # a series without values yet
    ]
    return int(rows[0].metric_id), sorted(out, key=lambda p: (p.run_pk, p.gpu or "", p.sid, p.lo))


def _pieces_clause(chosen: Sequence[Piece], numbers: Sequence[int] | None = None) -> str:
    """The pieces as a VALUES list (integers only, written by us): w(i, sid, lo, hi), `i` the
    piece's number (its position, unless given)."""
    numbers = range(len(chosen)) if numbers is None else numbers
    rows = ", ".join(
        f"({i}, {p.sid}, {p.lo}, {p.hi}, {p.first}, {p.every}, {p.keep})"
        for i, p in zip(numbers, chosen, strict=True)
    )
    return f"(VALUES {rows}) AS w(i, sid, lo, hi, a, e, k)"


def _sampled(chosen: Sequence[Piece]) -> str:
    """The condition that keeps a sampled piece's windows (`Piece.every`), true of the rest."""
    if all(p.every == 1 for p in chosen):
        return ""
    return " AND (p.step - w.a) % w.e < w.k"


def _values(chosen: Sequence[Piece], columns: str, numbers: Sequence[int] | None = None) -> str:
    """Each piece's values (as `w.i`, step, value): raw ones, compacted and hot, and the 8-step
    block means of runs whose raw values were dropped. `columns` picks what to keep of them."""
    w = _pieces_clause(chosen, numbers)
    sids = f"p.series_id IN ({', '.join(str(s) for s in sorted({p.sid for p in chosen}))})"
    keep = _sampled(chosen)
    parts = [
        f"SELECT {columns} FROM {w} JOIN points p ON p.series_id = w.sid "
        f"AND p.step BETWEEN w.lo AND w.hi{keep} WHERE p.metric_id = :metric_id AND {sids}",
        f"SELECT {columns} FROM {w} JOIN points_hot p ON p.series_id = w.sid "
        f"AND p.step BETWEEN w.lo AND w.hi{keep} WHERE {sids}",
    ]  # the series again as a filter of the scan itself, which DuckDB applies before the join
    dropped = [p.sid for p in chosen if p.dropped]
    if dropped:
        parts.append(
            f"SELECT {columns} FROM {w} JOIN ({_means(dropped)}) AS p ON p.series_id = w.sid "
            f"AND p.step BETWEEN w.lo AND w.hi{keep}"
        )
    return " UNION ALL ".join(parts)


def _values_by_piece(chosen: Sequence[Piece]) -> str:
    """PostgreSQL: the pieces' values (`value`), each step range a piece reads (`windows`) by a
    range scan of the (series, step) index of its own (a lateral join): joined at once, the
    planner would hash every value of a series against every window of it."""
    ranges = [replace(p, lo=lo, hi=hi, every=1, keep=1) for p in chosen for lo, hi in p.windows()]
    w = _pieces_clause(ranges)
    parts = [
        f"SELECT p.value FROM {w} CROSS JOIN LATERAL (SELECT value FROM points "
        "WHERE series_id = w.sid AND step BETWEEN w.lo AND w.hi AND metric_id = :metric_id "
        "UNION ALL SELECT value FROM points_hot WHERE series_id = w.sid "
        "AND step BETWEEN w.lo AND w.hi) AS p"
    ]
    dropped = [p.sid for p in chosen if p.dropped]
    if dropped:
        parts.append(
            f"SELECT p.value FROM {w} JOIN ({_means(dropped)}) AS p ON p.series_id = w.sid "
            "AND p.step BETWEEN w.lo AND w.hi"
        )
    return " UNION ALL ".join(parts)


def _means(sids: Sequence[int]) -> str:
    """The 8-step block means of series whose raw values were dropped (series_id, step: the
    block's first stored step, value). A block's rollup may sit in parts across chunks
    (DuckDB): one mean per block."""
    return (
        "SELECT r.series_id, min(r.step_lo) AS step, sum(r.vsum) / nullif(sum(r.finite), 0) "
        "AS value FROM rollups r WHERE r.metric_id = :metric_id AND r.level = 1 "
        f"AND r.series_id IN ({', '.join(map(str, sids))}) GROUP BY r.series_id, r.block"
    )


def stats(conn: Connection, metric_id: int, chosen: Sequence[Piece]) -> list[Stats]:
    """Per piece (in the order given): see `Stats`."""
    if not chosen:
        return []
    fin = _FINITE.replace("value", "p.value")
    summed = [i for i, p in enumerate(chosen) if p.whole and not p.dropped]
    scanned = [i for i, p in enumerate(chosen) if not (p.whole and not p.dropped)]
    queries = []
    if summed:
        w = _pieces_clause([chosen[i] for i in summed], summed)
        queries.append(
            "SELECT i, sum(finite) AS finite, sum(total) - sum(finite) AS nonfinite, "
            "min(vmin) AS vmin, max(vmax) AS vmax, sum(vsum) AS vsum FROM ("
            f"SELECT w.i, r.finite, r.total, r.vmin, r.vmax, r.vsum FROM {w} JOIN rollups r "
            "ON r.series_id = w.sid WHERE r.metric_id = :metric_id AND r.level = 6 "
            f"UNION ALL SELECT w.i, CASE WHEN {fin} THEN 1 ELSE 0 END, 1, "
            f"CASE WHEN {fin} THEN p.value END, CASE WHEN {fin} THEN p.value END, "
            f"CASE WHEN {fin} THEN p.value ELSE 0 END FROM {w} "
            "JOIN points_hot p ON p.series_id = w.sid) AS s GROUP BY i"
        )  # the widest rollups hold every compacted value; the hot ones are added
    if scanned:
        values = _values([chosen[i] for i in scanned], "w.i, p.value", scanned)
        queries.append(
            f"SELECT i, count(*) FILTER (WHERE {fin}) AS finite, "
            f"count(*) FILTER (WHERE NOT ({fin})) AS nonfinite, "
            f"min(p.value) FILTER (WHERE {fin}) AS vmin, "
            f"max(p.value) FILTER (WHERE {fin}) AS vmax, "
            f"coalesce(sum(p.value) FILTER (WHERE {fin}), 0) AS vsum "
            f"FROM ({values}) AS p GROUP BY i"
        )
    out = [Stats(0, 0, None, None, 0.0)] * len(chosen)
    for query in queries:
        for r in conn.execute(sa.text(query), {"metric_id": metric_id}):
            out[int(r.i)] = Stats(
                int(r.finite or 0),
                int(r.nonfinite or 0),
                _float(r.vmin),
                _float(r.vmax),
                float(r.vsum or 0.0),
            )
    return out


@dataclass(frozen=True)
class Quantiles:
    """`QUANTILES` of a group's finite values (None without any), and how many values they
    were computed from."""

    values: list[float | None]
    count: int


def quantiles(
    conn: Connection, dialect: str, metric_id: int, groups: Mapping[str, Sequence[Piece]]
) -> dict[str, Quantiles]:
    """Per group (a GPU type): quantiles (`QUANTILES`, interpolated) of its pieces' finite
    values, pooled — exact over the pieces given (`windows` narrows them to a sample first).
    DuckDB computes them all in one grouped statement (it selects, it does not sort);
    PostgreSQL sorts each group's values in a statement of its own (grouped, it would sort
    everything by group first, then each group again)."""
    out = {g: Quantiles([None] * len(QUANTILES), 0) for g in groups}
    named = [(g, pieces) for g, pieces in groups.items() if pieces]
    if not named:
        return out
    fin = _FINITE.replace("value", "p.value")
    qs = sql.quantiles_text(dialect, "p.value", QUANTILES)
    if dialect == "duckdb":
        flat = [(n, p) for n, (_, pieces) in enumerate(named) for p in pieces]
        values = _values([p for _, p in flat], "w.i, p.value", range(len(flat)))
        owner = ", ".join(f"({i}, {n})" for i, (n, _) in enumerate(flat))
        query = (
            f"SELECT o.g, {qs}, count(*) FROM ({values}) AS p JOIN (VALUES {owner}) AS o(i, g) "
            f"ON o.i = p.i WHERE {fin} GROUP BY o.g"
        )
        for g, found, count in conn.execute(sa.text(query), {"metric_id": metric_id}):
            out[named[int(g)][0]] = Quantiles([_float(v) for v in found], int(count))
        return out
    _sort_in_memory(conn)
    for g, pieces in named:
        query = f"SELECT {qs}, count(*) FROM ({_values_by_piece(pieces)}) AS p WHERE {fin}"
        found, count = conn.execute(sa.text(query), {"metric_id": metric_id}).one()
        if found:
            out[g] = Quantiles([_float(v) for v in found], int(count))
    return out


def windows(chosen: Sequence[tuple[Piece, int]], target: int, per_piece: int) -> list[Piece]:
    """A sample of the pieces' values of about `target` values: each (piece, its finite count)
    whose share of `target` is less than all of it reads `per_piece` evenly spaced windows of
    consecutive steps over the steps it holds (`Piece.every`, `Piece.keep`). On PostgreSQL a
    window is one range read of the (series, step) index, so the sample costs what it keeps,
    not what is stored; spread over the whole run, it keeps early and late values alike."""
    total = sum(n for _, n in chosen)
    if total <= target:
        return [p for p, _ in chosen]
    out: list[Piece] = []
    for piece, n in chosen:
        span = piece.last - piece.first + 1
        count = min(per_piece, span)
        every = span // count
        # Each piece keeps the sample's fraction of its steps; one that holds nothing, all.
        keep = math.ceil(target * span / (total * count)) if n else every
        if keep >= every:
            out.append(piece)  # its share is all of it
            continue
        hi = min(piece.hi, piece.first + (count - 1) * every + keep - 1)
        out.append(replace(piece, lo=piece.first, hi=hi, whole=False, every=every, keep=keep))
    return out


def _sort_in_memory(conn: Connection) -> None:
    """On PostgreSQL, for the rest of the read's transaction: room to sort one GPU type's values
    in memory (a million values take about 40 MB to sort; spilled to disk they take twice as
    long)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SET LOCAL work_mem = '64MB'"))


def piece_values(
    conn: Connection, metric_id: int, chosen: Sequence[tuple[Piece, int]]
) -> dict[str, Any]:
    """The finite values of each (piece, stride) at the steps of the piece that are multiples of
    the stride, ordered by run, GPU, step and series: columns gpu, run_pk, step, value. On
    PostgreSQL they are looked up by those steps in the (series, step) index, not read and
    filtered; DuckDB, which has no such index, filters the pieces' values as it scans them."""
    wanted = [(p, stride) for p, stride in chosen if _first_multiple(p, stride) <= p.last]
    if not wanted:
        return {"gpu": [], "run_pk": [], "step": [], "value": []}
    keys = ", ".join(
        f"({i}, {_literal(p.gpu)}, {p.run_pk}, {stride})" for i, (p, stride) in enumerate(wanted)
    )
    where = _FINITE.replace("value", "v.value")
    if conn.dialect.name == "duckdb":
        prefix = ""
        source = _values([p for p, _ in wanted], "w.i, w.sid, p.step, p.value")
        where += " AND v.step % k.stride = 0"
    else:
        steps = " UNION ALL ".join(
            f"SELECT {i} AS i, {p.sid} AS sid, CAST(g.s AS BIGINT) AS step "
            f"FROM generate_series({_first_multiple(p, stride)}, {p.last}, {stride}) AS g(s)"
            for i, (p, stride) in enumerate(wanted)
        )
        prefix = f"WITH x AS MATERIALIZED ({steps}) "
        sources = [
            "SELECT x.i, x.sid, x.step, p.value FROM x JOIN points p ON p.series_id = x.sid "
            "AND p.step = x.step WHERE p.metric_id = :metric_id",
            "SELECT x.i, x.sid, x.step, p.value FROM x JOIN points_hot p "
            "ON p.series_id = x.sid AND p.step = x.step",
        ]
        dropped = [p.sid for p, _ in wanted if p.dropped]
        if dropped:
            sources.append(
                f"SELECT x.i, x.sid, x.step, m.value FROM x JOIN ({_means(dropped)}) AS m "
                "ON m.series_id = x.sid AND m.step = x.step"
            )
        source = " UNION ALL ".join(sources)
    query = sa.text(
        f"{prefix}SELECT k.gpu, k.run_pk, v.step, v.value FROM ({source}) AS v "
        f"JOIN (VALUES {keys}) AS k(i, gpu, run_pk, stride) ON k.i = v.i WHERE {where} "
        "ORDER BY k.run_pk, k.gpu, v.step, v.sid"
    )
    return sql.fetch_columns(conn, query, {"metric_id": metric_id})


def _first_multiple(p: Piece, stride: int) -> int:
    return -(-p.first // stride) * stride


def _literal(text: str | None) -> str:
    """A GPU name as an SQL string literal (names are reported by clients: quotes doubled)."""
    return "NULL" if text is None else "'" + text.replace("'", "''") + "'"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
