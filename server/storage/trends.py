"""Trend lines for a page of runs: one metric of each run in a few dozen buckets, in one query.

Each run's series gets the rollup level whose blocks tile its buckets (`series.plan`); the rows
are read together, the values still hot joining their buckets raw — a page of fifty runs costs
fifty short reads of rollups, whatever else the database holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql
from server.storage import tables as t
from server.storage.compaction import width
from server.storage.series import plan


def trends(
    conn: Connection, run_pks: Sequence[int], metric: str, points: int = 30
) -> dict[int, list[float]]:
    """Per run: the metric's bucket values (the mean of a bucket's finite values, NaN for a
    bucket without any) over the run's whole span, trainer side first."""
    s = t.series.c
    heads = conn.execute(
        sa.select(s.id, s.run_pk, s.metric_id, s.source, s.first_step, s.last_step).where(
            s.run_pk.in_(list(run_pks)), s.metric == metric, s.points > 0
        )
    ).all()
    chosen: dict[int, tuple[int, int, int, int]] = {}  # run → (series, metric id, level, bucket)
    for h in sorted(heads, key=lambda h: (h.source != "trainer", h.id)):
        if h.run_pk not in chosen:
            p = plan(h.first_step, h.last_step, points)
            chosen[h.run_pk] = (h.id, h.metric_id, p.level, p.bucket)
    if not chosen:
        return {}
    parts = []
    params: dict[str, object] = {}
    for i, (sid, metric_id, level, bucket) in enumerate(chosen.values()):
        params |= {f"s{i}": sid, f"m{i}": metric_id, f"b{i}": bucket}
        fin = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"
        raw = (
            f"SELECT CAST(:s{i} AS BIGINT) AS sid, floor(step / :b{i}) AS b, "
            f"CASE WHEN {fin} THEN value ELSE 0 END AS vsum, "
            f"CASE WHEN {fin} THEN 1 ELSE 0 END AS finite"
        )
        parts.append(f"{raw} FROM points_hot WHERE series_id = :s{i}")
        if level == 0:
            parts.append(f"{raw} FROM points WHERE metric_id = :m{i} AND series_id = :s{i}")
        else:
            parts.append(
                f"SELECT CAST(:s{i} AS BIGINT), floor(block * {width(level)} / :b{i}), vsum, "
                f"finite FROM rollups WHERE metric_id = :m{i} AND series_id = :s{i} "
                f"AND level = {level}"
            )
    query = sa.text(
        "SELECT sid, b, sum(vsum) / nullif(sum(finite), 0) AS mean FROM ("
        + " UNION ALL ".join(parts)
        + ") AS parts GROUP BY sid, b ORDER BY sid, b"
    )
    by_series: dict[int, list[float]] = {}
    for sid, _, mean in sql.fetch_text(conn, query, params):
        by_series.setdefault(int(sid), []).append(float("nan") if mean is None else float(mean))
    return {run: by_series.get(sid, []) for run, (sid, *_) in chosen.items()}
