"""Trend lines for a page of runs: one metric of each run (the same for all, or each run's own)
in a few dozen buckets, in one read.

Each run's series (trainer side first) is read as a downsampled series of `points` buckets
(`series.read`): the runs of a page share one scan of the rollups per level and one of the hot
values, so a page of fifty runs costs a handful of queries, whatever else the database holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.engine import Connection

from server.storage.reading import series

_MEAN = series.BLOCK_FIELDS.index("mean")


def trends(
    conn: Connection, run_pks: Sequence[int], metric: str, points: int = 30
) -> dict[int, list[float]]:
    """Per run: the metric's bucket values (the mean of a bucket's finite values, NaN for a
    bucket without any) over the run's whole span."""
    return trends_of(conn, dict.fromkeys(run_pks, metric), points)


def trends_of(
    conn: Connection, metrics: Mapping[int, str], points: int = 30
) -> dict[int, list[float]]:
    """`trends` with a metric per run (each run's own headline signal, say), in the same one
    read: runs without their metric are left out."""
    found = series.find_many(conn, list(metrics), sorted(set(metrics.values())))
    runs = [pk for pk, metric in metrics.items() if (pk, metric) in found]
    wanted = [
        series.Wanted(
            pk, found[(pk, metrics[pk])][0], found[(pk, metrics[pk])][1], max_points=points
        )
        for pk in runs
    ]
    out = {}
    for pk, result in zip(runs, series.read(conn, wanted), strict=True):
        if result.blocks:
            out[pk] = [float("nan") if b[_MEAN] is None else float(b[_MEAN]) for b in result.blocks]
    return out
