"""Runs and their values written straight into a PostgreSQL database at revision 0009, in that
revision's SQL: the layout before migration 0010 (values appended to `points_hot`, compaction
moving them into `points` with a partial rollup row per block and round), which the test of
that migration starts from. Written here, not through today's ingest and compaction, which write
today's columns: a column added later would not exist at 0009."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage.db import Database
from tests.stored_runs import insert_runs

ROLLUP_FIELDS = (
    "step_lo, step_hi, vmin, vmax, vsum, finite, total, last_step, last_value, last_time, "
    "nan, pos_inf, neg_inf"
)
_FINITE = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"


@dataclass(frozen=True)
class StoredRun:
    """A run of project "p" with one trainer actor ("t0") that logged `values` (metric → one
    value per step from 0) at time 1e9 + step, on the GPU of each of its `segments` ((first
    step, GPU) in step order)."""

    segments: tuple[tuple[int, str], ...]
    values: Mapping[str, np.ndarray]


def store_at_0009(
    db: Database, runs: Mapping[str, StoredRun], batches: Sequence[tuple[int, int]]
) -> None:
    """`runs` by id as revision 0009 stored them: runs, series with their heads, step records,
    hardware segments; values COPYed into `points_hot` batch by batch ([lo, hi) steps), each
    batch but the last then compacted (`compact_at_0009`)."""
    with db.write() as conn:
        conn.execute(sa.text("INSERT INTO projects (name, created_at) VALUES ('p', 0)"))
        insert_runs(conn, {run: ("{}", '{"lr": 1e-06}') for run in runs})
        for metric in sorted({m for run in runs.values() for m in run.values}):
            conn.execute(
                sa.text("INSERT INTO metric_names VALUES (nextval('metric_id_seq'), :name)"),
                {"name": metric},
            )
        series = {run_id: _store_run(conn, run_id, run) for run_id, run in runs.items()}
    for number, (lo, hi) in enumerate(batches):
        with db.write() as conn:
            for run_id, run in runs.items():
                for metric, values in run.values.items():
                    steps = range(lo, hi)
                    sids, times = [series[run_id][metric]] * len(steps), [1e9 + s for s in steps]
                    _copy_into_points_hot(conn, sids, steps, values[lo:hi].tolist(), times)
        if number < len(batches) - 1:
            compact_at_0009(db)


def _store_run(conn: Connection, run_id: str, run: StoredRun) -> dict[str, int]:
    """A run's last step, step records, hardware segments and series (with their heads); the
    ids of its series by metric."""
    steps = len(next(iter(run.values.values())))
    pk = conn.execute(sa.text("SELECT pk FROM runs WHERE id = :id"), {"id": run_id}).scalar_one()
    conn.execute(
        sa.text("UPDATE runs SET last_step = :last, last_seen = 0 WHERE pk = :pk"),
        {"last": steps - 1, "pk": pk},
    )
    ends = [first - 1 for first, _ in run.segments[1:]] + [steps - 1]
    for seq, ((first, gpu), last) in enumerate(zip(run.segments, ends, strict=True)):
        key = {"pk": pk, "seq": seq, "gpu": gpu, "first": first, "last": last}
        conn.execute(
            sa.text(
                "INSERT INTO step_records (run_pk, source, actor, step, time, gpu) "
                "SELECT :pk, 'trainer', 't0', s, 1e9 + s, :gpu "
                "FROM generate_series(CAST(:first AS BIGINT), CAST(:last AS BIGINT)) s"
            ),
            key,
        )
        conn.execute(
            sa.text(
                "INSERT INTO actors (run_pk, source, actor, seq, gpu, first_step, last_step, "
                "steps, first_time, last_time) VALUES (:pk, 'trainer', 't0', :seq, :gpu, "
                ":first, :last, :last - :first + 1, 1e9 + :first, 1e9 + :last)"
            ),
            key,
        )
    return {
        metric: _store_series(conn, pk, metric, values) for metric, values in run.values.items()
    }


def _store_series(conn: Connection, pk: int, metric: str, values: np.ndarray) -> int:
    """A series and its head (what ingest kept of it: count, ends, last value, NaN and ±Inf)."""
    head = {
        "pk": pk,
        "metric": metric,
        "n": len(values),
        "last": len(values) - 1,
        "last_value": float(values[-1]),
        "nan": int(np.isnan(values).sum()),
        "pos_inf": int((values == np.inf).sum()),
        "neg_inf": int((values == -np.inf).sum()),
    }
    return int(
        conn.execute(
            sa.text(
                "INSERT INTO series (id, run_pk, source, actor, metric, metric_id, points, "
                "first_step, last_step, last_value, first_time, last_time, nan, pos_inf, neg_inf) "
                "SELECT nextval('series_id_seq'), :pk, 'trainer', 't0', name, id, :n, 0, :last, "
                ":last_value, 1e9, 1e9 + :last, :nan, :pos_inf, :neg_inf FROM metric_names "
                "WHERE name = :metric RETURNING id"
            ),
            head,
        ).scalar_one()
    )


def _copy_into_points_hot(
    conn: Any,
    sids: Sequence[int],
    steps: Sequence[int],
    values: Sequence[float],
    times: Sequence[float],
) -> None:
    """How values were written before revision 0010: COPY into the table `points_hot`."""
    text = {math.inf: "Infinity", -math.inf: "-Infinity"}
    buf = io.StringIO()
    for sid, step, value, tm in zip(sids, steps, values, times, strict=True):
        shown = "NaN" if math.isnan(value) else text.get(value, repr(float(value)))
        buf.write(f"{sid}\t{step}\t{shown}\t{tm!r}\n")
    with conn.connection.driver_connection.cursor().copy(
        "COPY points_hot (series_id, step, value, time) FROM STDIN"
    ) as copy:
        copy.write(buf.getvalue())


def compact_at_0009(db: Database) -> None:
    """How compaction ran before revision 0010: the hot values deleted and inserted again into
    `points` as a chunk, with a partial rollup row per block and chunk at every level."""
    levels = " UNION ALL ".join(_rollups(level) for level in range(1, 7))
    with db.maintain() as conn:
        chunk = {"chunk": conn.execute(sa.text("SELECT nextval('chunk_id_seq')")).scalar_one()}
        conn.execute(
            sa.text(
                "CREATE TEMPORARY TABLE moved AS SELECT s.metric_id, h.series_id, h.step, "
                "h.value, h.time FROM points_hot h JOIN series s ON s.id = h.series_id"
            )
        )
        conn.execute(sa.text("DELETE FROM points_hot"))
        conn.execute(
            sa.text(
                "INSERT INTO points (metric_id, series_id, step, value, chunk) SELECT metric_id, "
                "series_id, step, value, :chunk FROM moved ORDER BY metric_id, series_id, step"
            ),
            chunk,
        )
        conn.execute(
            sa.text(
                f"INSERT INTO rollups (metric_id, series_id, level, block, {ROLLUP_FIELDS}, "
                f"chunk) SELECT *, :chunk FROM ({levels}) AS r "
                "ORDER BY metric_id, series_id, level, block"
            ),
            chunk,
        )
        conn.execute(
            sa.text(
                "INSERT INTO chunks (id, kind, level, rows, created_at) SELECT :chunk, kind, 0, "
                "(SELECT count(*) FROM moved), 0 FROM (VALUES ('points'), ('rollups')) AS k(kind)"
            ),
            chunk,
        )
        conn.execute(sa.text("DROP TABLE moved"))


def _rollups(level: int) -> str:
    """The rollup rows of one level of the moved values, as revision 0009 computed them."""
    w = 8**level
    return (
        f"SELECT metric_id, series_id, CAST({level} AS SMALLINT) AS level, "
        f"CAST(floor(step / {w}.0) AS BIGINT) AS block, min(step), max(step), "
        f"min(CASE WHEN {_FINITE} THEN value END), max(CASE WHEN {_FINITE} THEN value END), "
        f"coalesce(sum(CASE WHEN {_FINITE} THEN value END), 0), "
        f"sum(CASE WHEN {_FINITE} THEN 1 ELSE 0 END), count(*), max(step), "
        "(array_agg(value ORDER BY step DESC))[1], (array_agg(time ORDER BY step DESC))[1], "
        "sum(CASE WHEN value > 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END), "
        "sum(CASE WHEN value = 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END), "
        "sum(CASE WHEN value = '-Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) "
        f"FROM moved GROUP BY metric_id, series_id, floor(step / {w}.0)"
    )
