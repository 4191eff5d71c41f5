"""Aggregate reads across runs: probability-bucket sums and heatmap cells (per-GPU
distributions of a metric are `hardware`'s).

Bucket sums over a whole run come from its 64-step block sums (plus the rows still hot), so a
project's bucket curves cost what its runs' blocks hold, not their every step; a step range
reads the run's sorted raw rows. A value's GPU is its actor's GPU segment at that step (a run
resumed on other hardware counts under each GPU for its own steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql
from server.storage.writing.compaction import BUCKET_BLOCK, BUCKET_SUMS, SEGMENT_JOIN

GroupBy = Literal["none", "gpu", "actor", "run"]
SUMS = ", ".join(BUCKET_SUMS)

_GROUPS = {
    "gpu": "coalesce(b.gpu, 'unknown')",
    "actor": "b.actor",
    "run": "r.id",
    "none": "'all'",
}


_RAW = (
    "SELECT b.run_pk, b.source, b.actor, b.step, b.basis, b.idx, b.lo, b.hi, "
    + ", ".join(f"b.{s}" for s in BUCKET_SUMS)
    + ", 1 AS steps, a.gpu"
)
_BLOCKS = (
    f"SELECT run_pk, source, actor, step_lo AS step, basis, idx, lo, hi, {SUMS}, steps, gpu "
    "FROM bucket_blocks"
)
_IN_RANGE = "b.step BETWEEN :step_min AND :step_max"
_HOT = f"{_RAW} FROM bucket_hot b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks AND {_IN_RANGE}"
_BLOCKS_IN_RANGE = "step_hi >= :step_min AND step_lo <= :step_max"


def _bucket_source(step_range: bool) -> str:
    """Bucket sums as partial rows (one per step row, or per 64-step block), always with the
    hot rows: raw rows when a step range is asked — block sums for the runs whose raw rows
    retention dropped (`:dropped`) — else the block sums."""
    if step_range:
        cold = (
            f"{_RAW} FROM bucket_rows b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks AND {_IN_RANGE} "
            "UNION ALL "
            f"{_BLOCKS} WHERE run_pk IN :dropped AND {_BLOCKS_IN_RANGE}"
        )
    else:
        cold = f"{_BLOCKS} WHERE run_pk IN :run_pks"
    return f"{cold} UNION ALL {_HOT}"


def _params(run_pks: Sequence[int], step_min: int | None, step_max: int | None) -> dict[str, Any]:
    return {
        "run_pks": list(run_pks) or [-1],
        "step_min": -1 if step_min is None else step_min,
        "step_max": 2**62 if step_max is None else step_max,
    }


def bucket_totals(
    conn: Connection,
    *,
    run_pks: Sequence[int],
    dropped: Sequence[int],
    step_min: int | None,
    step_max: int | None,
    group_by: GroupBy,
    basis: str,
) -> list[Any]:
    """Bucket sums over a step range, per group; columns named as `BucketRowOut`'s fields.
    `dropped`: the runs whose raw rows retention dropped (their blocks stand in)."""
    if not run_pks:
        return []
    ranged = step_min is not None or step_max is not None
    group = _GROUPS[group_by]
    keys = "b.idx" if group_by == "none" else f"{group}, b.idx"
    query = sql.text(
        f"SELECT {group} AS grp, b.idx, min(b.lo) AS lo, max(b.hi) AS hi, "
        + ", ".join(f"sum(b.{s}) AS {s}" for s in BUCKET_SUMS)
        + ", sum(b.steps) AS steps, "
        "count(DISTINCT b.run_pk || '|' || b.source || '|' || b.actor) AS actors "
        f"FROM ({_bucket_source(ranged)}) AS b JOIN runs r ON r.pk = b.run_pk "
        f"WHERE b.basis = :basis GROUP BY {keys} ORDER BY {keys}",
        "run_pks",
        "dropped",
    )
    params = {
        **_params(run_pks, step_min, step_max),
        "basis": basis,
        "dropped": list(dropped) or [-1],
    }
    return list(conn.execute(query, params).all())


def bucket_blocks(
    conn: Connection,
    *,
    run_pk: int,
    step_min: int | None,
    step_max: int | None,
    basis: str,
    max_points: int,
    dropped: bool,
) -> list[Any]:
    """Bucket sums per block of steps (heatmap cells), blocks aligned to multiples of their
    width; columns named as `BucketStepOut`'s. Wide views read the 64-step block sums."""
    span = conn.execute(
        sa.text("SELECT min(first_step), max(last_step) FROM actors WHERE run_pk = :run_pk"),
        {"run_pk": run_pk},
    ).one()
    if span[0] is None:
        return []
    lo = max(span[0], step_min if step_min is not None else -1)
    hi = min(span[1], step_max if step_max is not None else 2**62)
    if lo > hi:
        return []
    needed = max(1, -(-(hi - lo + 1) // max_points))
    use_blocks = dropped or needed >= BUCKET_BLOCK
    width = -(-needed // BUCKET_BLOCK) * BUCKET_BLOCK if use_blocks else needed
    if use_blocks:
        source = f"{_BLOCKS} WHERE run_pk IN :run_pks AND {_BLOCKS_IN_RANGE} UNION ALL {_HOT}"
    else:
        source = (
            f"{_RAW} FROM bucket_rows b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks "
            f"AND {_IN_RANGE} UNION ALL {_HOT}"
        )
    query = sql.text(
        "SELECT min(step) AS step, max(step) AS step_end, min(lo) AS lo, max(hi) AS hi, "
        "sum(tokens) AS tokens, sum(sum_abs_d) AS sum_abs_d, sum(sum_k3) AS sum_k3, "
        f"sum(oob) AS oob FROM ({source}) AS b WHERE basis = :basis "
        f"GROUP BY floor(step / {width}), idx ORDER BY min(step), idx",
        "run_pks",
    )
    params = {**_params([run_pk], lo, hi), "basis": basis}
    return list(conn.execute(query, params).all())
