"""Columnar appends for the ingest path: one statement per table whatever the batch size.

DuckDB takes Arrow tables scanned by `INSERT … SELECT`; PostgreSQL takes `unnest` of arrays (a
multi-row VALUES statement costs more to compile than to run) and COPY for the points. Values
and bucket rows go to the hot tables; compaction sorts them into place later.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.records import BucketTable, RecordKey
from server.storage.db import Database, raw_duckdb
from server.storage.schema import tables as t
from server.storage.writing import pg_points
from server.storage.writing.notes import chunks
from server.storage.writing.point_columns import Points

SeriesKey = tuple[int, str, str, str]  # (run pk, source, actor, metric)
StepRecord = tuple[RecordKey, float, str | None, int | None]  # key, time, gpu, weight version

_RECORD_COLUMNS = ("run_pk", "source", "actor", "step", "time", "gpu", "weight_version")
_RECORD_ARROW = (
    pa.int64(),
    pa.string(),
    pa.string(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.int64(),
)
_RECORD_PG = ("bigint[]", "text[]", "text[]", "bigint[]", "float8[]", "text[]", "bigint[]")
PG_COPY_ROWS = 1 << 14


@contextmanager
def _registered(conn: Connection, prefix: str, table: pa.Table) -> Iterator[tuple[Any, str]]:
    """An Arrow table visible to DuckDB under a unique name for the duration of a statement."""
    raw = raw_duckdb(conn)
    name = f"_{prefix}_{uuid.uuid4().hex}"
    raw.register(name, table)
    try:
        yield raw, name
    finally:
        raw.unregister(name)


def step_records(conn: Connection, db: Database, rows: Sequence[StepRecord]) -> set[RecordKey]:
    """Insert step records, skipping existing keys; return the keys that were new."""
    columns: list[list[Any]] = [[] for _ in _RECORD_COLUMNS]
    for (run_pk, source, actor, step), time, gpu, version in rows:
        for column, value in zip(
            columns, (run_pk, source, actor, step, time, gpu, version), strict=True
        ):
            column.append(value)
    returning = "RETURNING run_pk, source, actor, step"
    if db.is_duckdb:
        table = pa.table(
            {
                name: pa.array(values, typ)
                for name, values, typ in zip(_RECORD_COLUMNS, columns, _RECORD_ARROW, strict=True)
            }
        )
        with _registered(conn, "records", table) as (raw, name):
            found = raw.execute(
                f"INSERT INTO step_records SELECT * FROM {name} ON CONFLICT DO NOTHING {returning}"
            ).fetchall()
    else:
        arrays = ", ".join(
            f"CAST(:{name} AS {typ})" for name, typ in zip(_RECORD_COLUMNS, _RECORD_PG, strict=True)
        )
        statement = sa.text(
            f"INSERT INTO step_records ({', '.join(_RECORD_COLUMNS)}) "
            f"SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING {returning}"
        )
        found = list(conn.execute(statement, dict(zip(_RECORD_COLUMNS, columns, strict=True))))
    return {(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in found}


def series_ids(conn: Connection, db: Database, keys: set[SeriesKey]) -> dict[SeriesKey, int]:
    """Ids of the series for `keys`, creating missing ones. Cached per process: ids never change.

    New ids enter the cache only after the transaction commits, so a rolled-back batch cannot
    leave a cached id that points at nothing.
    """
    with db.series_lock:
        found = {k: db.series_ids[k] for k in keys if k in db.series_ids}
    missing = keys - found.keys()
    if not missing:
        return found
    run_pks = sorted({k[0] for k in missing})
    s = t.series.c
    for _ in range(2):  # look, create what is missing, look again
        rows = conn.execute(
            sa.select(s.id, s.run_pk, s.source, s.actor, s.metric).where(s.run_pk.in_(run_pks))
        ).all()
        for r in rows:
            key = (r.run_pk, r.source, r.actor, r.metric)
            if key in missing:
                found[key] = r.id
        missing = keys - found.keys()
        if not missing:
            break
        metric_ids = _metric_ids(conn, {k[3] for k in missing})
        values = [
            {
                "run_pk": k[0],
                "source": k[1],
                "actor": k[2],
                "metric": k[3],
                "metric_id": metric_ids[k[3]],
            }
            for k in sorted(missing)
        ]
        for chunk in chunks(values):
            conn.execute(pg_insert(t.series).values(chunk).on_conflict_do_nothing())
    if missing:
        raise RuntimeError(f"could not create series {sorted(missing)[:3]}")
    committed = dict(found)

    def remember(_conn: Connection) -> None:
        with db.series_lock:
            db.series_ids.update(committed)

    event.listen(conn, "commit", remember, once=True)
    return found


def _metric_ids(conn: Connection, names: set[str]) -> dict[str, int]:
    """Ids of metric names, creating the missing ones (names are interned: a compacted value
    carries a small integer, not a string)."""
    m = t.metric_names.c
    found = {r.name: r.id for r in conn.execute(sa.select(m.id, m.name).where(m.name.in_(names)))}
    for name in sorted(names - found.keys()):
        conn.execute(
            pg_insert(t.metric_names)
            .values(id=sa.func.nextval("metric_id_seq"), name=name)
            .on_conflict_do_nothing(index_elements=["name"])
        )
    if len(found) < len(names):
        rows = conn.execute(sa.select(m.id, m.name).where(m.name.in_(names)))
        found = {r.name: r.id for r in rows}
    return found


def stored_pairs(conn: Connection, pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which of the (series id, step) pairs already hold a value, hot or compacted. One query
    per table over the cross product of their series and steps: a superset, cheap to filter.
    A step whose raw value retention dropped counts as stored (its rollup still holds it)."""
    wanted = set(pairs)
    if not wanted:
        return set()
    sids = sorted({sid for sid, _ in wanted})
    steps = sorted({step for _, step in wanted})
    found: set[tuple[int, int]] = set()
    for table in (t.points_hot, t.points):
        p = table.c
        query = sa.select(p.series_id, p.step).where(
            p.series_id.in_(sids), p.step.between(steps[0], steps[-1]), p.step.in_(steps)
        )
        found |= {(r.series_id, r.step) for r in conn.execute(query)}
    s = t.series.c
    dropped = {
        r.id: r.raw_dropped_until
        for r in conn.execute(
            sa.select(s.id, s.raw_dropped_until).where(
                s.id.in_(sids), s.raw_dropped_until.is_not(None)
            )
        )
    }
    found |= {(sid, step) for sid, step in wanted if step <= dropped.get(sid, -1)}
    return found


def stored_bucket_keys(conn: Connection, keys: Iterable[RecordKey]) -> set[tuple[RecordKey, str]]:
    """Which (step record, basis) already have their bucket table stored, hot or compacted."""
    wanted = list(keys)
    if not wanted:
        return set()
    run_pks = sorted({k[0] for k in wanted})
    steps = sorted({k[3] for k in wanted})
    found: set[tuple[RecordKey, str]] = set()
    for table in (t.bucket_hot, t.bucket_rows):
        b = table.c
        query = (
            sa.select(b.run_pk, b.source, b.actor, b.step, b.basis)
            .where(b.run_pk.in_(run_pks), b.step.in_(steps))
            .distinct()
        )
        found |= {((r.run_pk, r.source, r.actor, r.step), r.basis) for r in conn.execute(query)}
    return found


def bucket_table_rows(key: RecordKey, table: BucketTable) -> list[dict[str, Any]]:
    run_pk, source, actor, step = key
    return [
        {
            "run_pk": run_pk,
            "source": source,
            "actor": actor,
            "step": step,
            "basis": table.basis,
            "idx": i,
            "lo": table.edges[i],
            "hi": table.edges[i + 1],
            "tokens": table.tokens[i],
            "sum_d": table.sum_d[i],
            "sum_abs_d": table.sum_abs_d[i],
            "sum_k3": table.sum_k3[i],
            "sum_reverse_k3": table.sum_reverse_k3[i],
            "oob": table.oob[i],
        }
        for i in range(len(table.edges) - 1)
    ]


def bucket_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    for chunk in chunks(rows):
        conn.execute(sa.insert(t.bucket_hot), chunk)


def points(conn: Connection, db: Database, p: Points) -> None:
    """Columnar append of values (with their step's wall time) to the hot table. DuckDB scans
    the columns as they are (no copy) and joins each value to its series id and its record's
    step and time; PostgreSQL's partitioned values table (`pg_points`) takes COPY of the values
    spelled out, `PG_COPY_ROWS` at a time so that only that many become Python objects at once."""
    if db.is_duckdb:
        values = pa.table(
            {"slot": pa.array(p.slots), "rec": pa.array(p.records), "value": pa.array(p.values)}
        )
        series = pa.table(
            {"slot": pa.array(np.arange(len(p.series), dtype=np.int32)), "id": pa.array(p.series)}
        )
        records = pa.table(
            {
                "rec": pa.array(np.arange(len(p.steps), dtype=np.int32)),
                "step": pa.array(p.steps),
                "time": pa.array(p.times),
            }
        )
        with (
            _registered(conn, "points", values) as (raw, v),
            _registered(conn, "series", series) as (_, s),
            _registered(conn, "records", records) as (_, r),
        ):
            raw.execute(
                f"INSERT INTO points_hot SELECT s.id, r.step, v.value, r.time FROM {v} AS v "
                f"JOIN {s} AS s ON v.slot = s.slot JOIN {r} AS r ON v.rec = r.rec"
            )
        return
    for at in range(0, len(p), PG_COPY_ROWS):
        sids, steps, values_, times = p.spelled(slice(at, at + PG_COPY_ROWS))
        pg_points.write(conn, db, sids.tolist(), steps.tolist(), values_.tolist(), times.tolist())
