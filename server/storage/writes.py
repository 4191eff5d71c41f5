"""The ingest write path: batches in the caller's transaction, columnar appends.

Idempotency without a primary key on `points`: a step record keyed by (run, source, actor, step)
is inserted with `ON CONFLICT DO NOTHING … RETURNING`, so the database tells us which keys are
new. Every value of a new key is appended without further checks (the common case). Only for keys
that already existed (a re-sent batch, or a second record for the same step carrying other
metrics) do we look up which (series, step) values are stored and append the rest. On PostgreSQL a
concurrent writer of the same key waits on the row lock and then sees the committed values, so
replicas stay exactly-once too.
"""

from __future__ import annotations

import io
import json
import math
import time as _time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.errors import Conflict, NotFound
from server.schemas.ingest import AnnotationIn, RecordIn, RunIn
from server.storage import tables as t
from server.storage.db import Database, raw_duckdb

DEFAULT_PROJECT = "default"
_CHUNK = 1000

RecordKey = tuple[int, str, str, int]


@dataclass(frozen=True)
class RunRow:
    pk: int
    id: str
    project: str
    labels: dict[str, str]
    created: bool = False


@dataclass(frozen=True)
class StoredRecord:
    """The values a batch newly stored for one step of one actor: what alarms evaluate."""

    run_id: str
    project: str
    labels: dict[str, str]
    source: str
    actor: str
    step: int
    time: float
    gpu: str | None
    weight_version: int | None
    metrics: dict[str, float]


@dataclass
class WriteResult:
    accepted: int = 0
    duplicates: int = 0
    annotations: int = 0
    values: int = 0
    stored: list[StoredRecord] = field(default_factory=list)
    new_projects: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BatchWrite:
    """One client batch with the rights of the token that sent it."""

    run: RunIn | None
    records: Sequence[RecordIn]
    annotations: Sequence[AnnotationIn] = ()
    default_project: str = DEFAULT_PROJECT
    allowed_projects: frozenset[str] | None = None


@dataclass
class _Merged:
    """Records of one batch merged by key: two records for the same step add their metrics."""

    run_id: str
    source: str
    actor: str
    step: int
    time: float
    gpu: str | None
    weight_version: int | None
    metrics: dict[str, float]
    buckets: list[Any]


def write_batches(
    conn: Connection, db: Database, batches: Sequence[BatchWrite], *, now: float | None = None
) -> list[WriteResult]:
    """Store several batches in the caller's transaction with one statement per table.

    The outcome is what writing them one after another would give (a key sent by two batches is
    new for the first and a duplicate for the second), but the fixed cost of each statement is
    paid once for the group. Any invalid batch raises and the caller's transaction stores nothing;
    `allowed_projects` (None: any) is checked for every run a batch touches, so a token of one
    project can never write into another project's run.
    """
    now = _time.time() if now is None else now
    wanted: set[str] = set()
    for batch in batches:
        wanted |= {r.run_id for r in batch.records} | {a.run_id for a in batch.annotations}
        if batch.run is not None:
            wanted.add(batch.run.id)
    runs = _load_runs(conn, wanted)
    results = [_check_batch(conn, batch, runs, now) for batch in batches]
    merged = [_merge(batch.records, now) for batch in batches]
    if any(merged):
        _write_records(conn, db, runs, merged, results)
    for batch, result in zip(batches, results, strict=True):
        if batch.annotations:
            result.annotations = _write_annotations(conn, runs, batch.annotations, now)
    _touch_runs(conn, runs, merged, now)
    return results


def _check_batch(
    conn: Connection, batch: BatchWrite, runs: dict[str, RunRow], now: float
) -> WriteResult:
    """Create or update the batch's run, then check every run it names exists and may be written.

    Runs are checked in batch order, so a batch naming a run that only a later batch creates
    fails as it would alone."""
    result = WriteResult()
    run = batch.run
    run_ids = {r.run_id for r in batch.records} | {a.run_id for a in batch.annotations}
    if run is not None:
        run_ids.add(run.id)
        runs[run.id] = _upsert_run(conn, run, runs.get(run.id), batch.default_project, now)
        if runs[run.id].created and _ensure_project(conn, runs[run.id].project, now):
            result.new_projects.append(runs[run.id].project)
    missing = sorted(run_ids - runs.keys())
    if missing:
        raise NotFound(
            f"unknown run {missing[0]!r}: send a `run` object with this id in the batch "
            '(e.g. {"run": {"id": "' + missing[0] + '", "project": "default"}, '
            '"records": [...]}) to create it',
            detail={"unknown_runs": missing},
        )
    if batch.allowed_projects is not None:
        for run_id in run_ids:
            if runs[run_id].project not in batch.allowed_projects:
                raise _forbidden(runs[run_id])
    return result


def _forbidden(row: RunRow) -> Exception:
    from server.errors import Forbidden

    return Forbidden(
        f"run {row.id!r} belongs to project {row.project!r}, which this token cannot write"
    )


def _load_runs(conn: Connection, run_ids: Iterable[str]) -> dict[str, RunRow]:
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    rows = conn.execute(
        sa.select(t.runs.c.pk, t.runs.c.id, t.runs.c.project, t.runs.c.labels).where(
            t.runs.c.id.in_(ids)
        )
    ).all()
    return {r.id: RunRow(r.pk, r.id, r.project, json.loads(r.labels)) for r in rows}


def _upsert_run(
    conn: Connection, run: RunIn, existing: RunRow | None, default_project: str, now: float
) -> RunRow:
    if existing is None:
        project = run.project or default_project
        values = {
            "id": run.id,
            "project": project,
            "name": run.name or run.id,
            "tags": json.dumps(run.tags or []),
            "labels": json.dumps(run.labels or {}),
            "config": _dumps(run.config or {}),
            "status": run.status or "running",
            "created_at": now,
            "last_seen": now,
        }
        stmt = pg_insert(t.runs).values(values).on_conflict_do_nothing(index_elements=["id"])
        conn.execute(stmt)
        row = conn.execute(
            sa.select(t.runs.c.pk, t.runs.c.project, t.runs.c.labels).where(t.runs.c.id == run.id)
        ).one()
        if row.project != project:
            raise Conflict(f"run {run.id!r} already exists in project {row.project!r}")
        return RunRow(row.pk, run.id, row.project, json.loads(row.labels), created=True)
    if run.project is not None and run.project != existing.project:
        raise Conflict(
            f"run {run.id!r} belongs to project {existing.project!r}, not {run.project!r}; "
            "a run cannot move between projects"
        )
    updates: dict[str, Any] = {}
    if run.name is not None:
        updates["name"] = run.name
    if run.tags is not None:
        updates["tags"] = json.dumps(run.tags)
    if run.labels is not None:
        updates["labels"] = json.dumps(run.labels)
    if run.status is not None:
        updates["status"] = run.status
    if run.config:
        stored = conn.execute(
            sa.select(t.runs.c.config).where(t.runs.c.pk == existing.pk)
        ).scalar_one()
        config = json.loads(stored)
        config.update(run.config)
        updates["config"] = _dumps(config)
    if updates:
        conn.execute(sa.update(t.runs).where(t.runs.c.pk == existing.pk).values(**updates))
    labels = run.labels if run.labels is not None else existing.labels
    return RunRow(existing.pk, existing.id, existing.project, labels)


def _dumps(document: Any) -> str:
    """JSON text for a config; values JSON cannot hold (dates, paths) are stored as strings."""
    return json.dumps(document, default=str, allow_nan=True)


def _ensure_project(conn: Connection, project: str, now: float) -> bool:
    stmt = (
        pg_insert(t.projects)
        .values(name=project, created_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
        .returning(t.projects.c.name)
    )
    return conn.execute(stmt).first() is not None


def _merge(records: Sequence[RecordIn], now: float) -> dict[tuple[str, str, str, int], _Merged]:
    merged: dict[tuple[str, str, str, int], _Merged] = {}
    for rec in records:
        key = (rec.run_id, rec.source, rec.actor, rec.step)
        seen = merged.get(key)
        if seen is None:
            merged[key] = _Merged(
                rec.run_id,
                rec.source,
                rec.actor,
                rec.step,
                rec.time if rec.time is not None else now,
                rec.gpu,
                rec.weight_version,
                dict(rec.metrics),
                list(rec.buckets or []),
            )
            continue
        for name, value in rec.metrics.items():
            seen.metrics.setdefault(name, value)
        seen.buckets.extend(rec.buckets or [])
        seen.gpu = seen.gpu or rec.gpu
        if seen.weight_version is None:
            seen.weight_version = rec.weight_version
    return merged


def _write_records(
    conn: Connection,
    db: Database,
    runs: dict[str, RunRow],
    merged: list[dict[tuple[str, str, str, int], _Merged]],
    results: list[WriteResult],
) -> None:
    """Append the step records and values of every batch; count each batch's outcome.

    The first batch that names a key owns its step record. A key named by several batches of
    the group is tracked value by value, so the later batches store only what is still missing.
    """
    owners: dict[RecordKey, _Merged] = {}
    shared: set[RecordKey] = set()
    for part in merged:
        for m in part.values():
            key = (runs[m.run_id].pk, m.source, m.actor, m.step)
            if key in owners:
                shared.add(key)
            else:
                owners[key] = m
    rows = [
        {
            "run_pk": key[0],
            "source": m.source,
            "actor": m.actor,
            "step": m.step,
            "time": m.time,
            "gpu": m.gpu,
            "weight_version": m.weight_version,
        }
        for key, m in owners.items()
    ]
    new_keys = _insert_step_records(conn, db, rows)
    names: dict[tuple[int, str, str], set[str]] = {}
    for part in merged:
        for m in part.values():
            names.setdefault((runs[m.run_id].pk, m.source, m.actor), set()).update(m.metrics)
    series_ids = _series_ids(
        conn, db, {(*base, name) for base, found in names.items() for name in found}
    )
    by_name: dict[tuple[int, str, str], dict[str, int]] = {}
    for (pk, source, actor, name), sid in series_ids.items():
        by_name.setdefault((pk, source, actor), {})[name] = sid
    old = [
        m
        for part in merged
        for m in part.values()
        if (key := (runs[m.run_id].pk, m.source, m.actor, m.step)) not in new_keys
        or owners[key] is not m
    ]
    stored_pairs = _stored_pairs(conn, series_ids, runs, old) if old else set()
    old_bucket_keys = _stored_bucket_keys(conn, runs, old) if old else set()

    sid_col: list[int] = []
    step_col: list[int] = []
    value_col: list[float] = []
    bucket_rows: list[dict[str, Any]] = []
    for part, result in zip(merged, results, strict=True):
        before = len(value_col)
        for m in part.values():
            run = runs[m.run_id]
            key = (run.pk, m.source, m.actor, m.step)
            is_new = key in new_keys and owners[key] is m
            track = key in shared
            sids = by_name[(run.pk, m.source, m.actor)]
            fresh: dict[str, float] = {}
            if is_new and not track:  # the common case: every value is new, column at a time
                fresh = m.metrics
                sid_col.extend(map(sids.__getitem__, fresh))
                step_col.extend(repeat(m.step, len(fresh)))
                value_col.extend(fresh.values())
            else:
                for name, value in m.metrics.items():
                    pair = (sids[name], m.step)
                    if not is_new and pair in stored_pairs:
                        continue
                    if track:
                        stored_pairs.add(pair)  # later batches of the group see it as stored
                    sid_col.append(pair[0])
                    step_col.append(m.step)
                    value_col.append(value)
                    fresh[name] = value
            added_buckets = False
            for table in m.buckets:
                if not is_new and (key, table.basis) in old_bucket_keys:
                    continue
                if track:
                    old_bucket_keys.add((key, table.basis))
                bucket_rows.extend(_bucket_rows(key, table))
                added_buckets = True
            if is_new or fresh or added_buckets:
                result.accepted += 1
            else:
                result.duplicates += 1
            if fresh:
                result.stored.append(
                    StoredRecord(
                        m.run_id,
                        run.project,
                        run.labels,
                        m.source,
                        m.actor,
                        m.step,
                        m.time,
                        m.gpu,
                        m.weight_version,
                        fresh,
                    )
                )
        result.values = len(value_col) - before
    if value_col:
        _append_points(conn, db, sid_col, step_col, value_col)
    if bucket_rows:
        for chunk in _chunks(bucket_rows, _CHUNK):
            conn.execute(sa.insert(t.bucket_rows), chunk)


_RECORD_COLUMNS = ("run_pk", "source", "actor", "step", "time", "gpu", "weight_version")
_RECORD_TYPES = (
    pa.int64(),
    pa.string(),
    pa.string(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.int64(),
)
_PG_RECORD_ARRAYS = ("bigint[]", "text[]", "text[]", "bigint[]", "float8[]", "text[]", "bigint[]")


def _insert_step_records(
    conn: Connection, db: Database, rows: list[dict[str, Any]]
) -> set[RecordKey]:
    """Insert step records, skipping existing keys; return the keys that were new.

    One statement per batch whatever its size: an Arrow scan on DuckDB, `unnest` of arrays on
    PostgreSQL (a multi-row VALUES statement costs more to compile than to run).
    """
    columns = {name: [row[name] for row in rows] for name in _RECORD_COLUMNS}
    returning = "RETURNING run_pk, source, actor, step"
    if db.is_duckdb:
        batch = pa.table(
            {
                name: pa.array(columns[name], typ)
                for name, typ in zip(_RECORD_COLUMNS, _RECORD_TYPES, strict=True)
            }
        )
        raw = raw_duckdb(conn)
        name = f"_records_batch_{uuid.uuid4().hex}"
        raw.register(name, batch)
        try:
            found = raw.execute(
                f"INSERT INTO step_records SELECT * FROM {name} ON CONFLICT DO NOTHING {returning}"
            ).fetchall()
        finally:
            raw.unregister(name)
    else:
        arrays = ", ".join(
            f"CAST(:{name} AS {typ})"
            for name, typ in zip(_RECORD_COLUMNS, _PG_RECORD_ARRAYS, strict=True)
        )
        statement = sa.text(
            f"INSERT INTO step_records ({', '.join(_RECORD_COLUMNS)}) "
            f"SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING {returning}"
        )
        found = list(conn.execute(statement, columns))
    return {(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in found}


def _series_ids(
    conn: Connection, db: Database, keys: set[tuple[int, str, str, str]]
) -> dict[tuple[int, str, str, str], int]:
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
    for _ in range(2):
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
        values = [
            {"run_pk": k[0], "source": k[1], "actor": k[2], "metric": k[3]} for k in sorted(missing)
        ]
        for chunk in _chunks(values, _CHUNK):
            conn.execute(pg_insert(t.series).values(chunk).on_conflict_do_nothing())
    if missing:
        raise RuntimeError(f"could not create series {sorted(missing)[:3]}")
    committed = dict(found)

    def _remember() -> None:
        with db.series_lock:
            db.series_ids.update(committed)

    _after_commit(conn, _remember)
    return found


def _after_commit(conn: Connection, callback: Any) -> None:
    from sqlalchemy import event

    def _listener(_conn: Connection) -> None:
        callback()

    event.listen(conn, "commit", _listener, once=True)


def _stored_pairs(
    conn: Connection,
    series_ids: dict[tuple[int, str, str, str], int],
    runs: dict[str, RunRow],
    old: list[_Merged],
) -> set[tuple[int, int]]:
    sids = sorted(
        {series_ids[(runs[m.run_id].pk, m.source, m.actor, n)] for m in old for n in m.metrics}
    )
    steps = sorted({m.step for m in old})
    if not sids:
        return set()
    p = t.points.c
    query = sa.select(p.series_id, p.step).where(
        p.series_id.in_(sids), p.step.between(steps[0], steps[-1]), p.step.in_(steps)
    )
    return {(r[0], r[1]) for r in conn.execute(query)}


def _stored_bucket_keys(
    conn: Connection, runs: dict[str, RunRow], old: list[_Merged]
) -> set[tuple[RecordKey, str]]:
    with_buckets = [m for m in old if m.buckets]
    if not with_buckets:
        return set()
    b = t.bucket_rows.c
    run_pks = sorted({runs[m.run_id].pk for m in with_buckets})
    steps = sorted({m.step for m in with_buckets})
    query = (
        sa.select(b.run_pk, b.source, b.actor, b.step, b.basis)
        .where(b.run_pk.in_(run_pks), b.step.in_(steps))
        .distinct()
    )
    return {((r[0], r[1], r[2], r[3]), r[4]) for r in conn.execute(query)}


def _bucket_rows(key: RecordKey, table: Any) -> list[dict[str, Any]]:
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


def _append_points(
    conn: Connection, db: Database, sids: list[int], steps: list[int], values: list[float]
) -> None:
    """Columnar append: an Arrow scan into DuckDB, COPY into PostgreSQL."""
    if db.is_duckdb:
        batch = pa.table(
            {
                "series_id": pa.array(sids, pa.int64()),
                "step": pa.array(steps, pa.int64()),
                "value": pa.array(values, pa.float64()),
            }
        )
        raw = raw_duckdb(conn)
        name = f"_points_batch_{uuid.uuid4().hex}"
        raw.register(name, batch)
        try:
            raw.execute(f"INSERT INTO points SELECT series_id, step, value FROM {name}")
        finally:
            raw.unregister(name)
        return
    driver: Any = conn.connection.driver_connection
    cursor = driver.cursor()
    with cursor.copy("COPY points (series_id, step, value) FROM STDIN") as copy:
        buf = io.StringIO()
        for sid, step, value in zip(sids, steps, values, strict=True):
            buf.write(f"{sid}\t{step}\t{_pg_float(value)}\n")
        copy.write(buf.getvalue())


def _pg_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _write_annotations(
    conn: Connection, runs: dict[str, RunRow], annotations: Sequence[AnnotationIn], now: float
) -> int:
    rows = [
        {
            "id": a.id or uuid.uuid4().hex,
            "run_pk": runs[a.run_id].pk,
            "step": a.step,
            "time": a.time if a.time is not None else now,
            "kind": a.kind,
            "source": a.source,
            "actor": a.actor,
            "text": a.text,
        }
        for a in annotations
    ]
    added = 0
    for chunk in _chunks(rows, _CHUNK):
        stmt = (
            pg_insert(t.run_annotations)
            .values(chunk)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(t.run_annotations.c.id)
        )
        added += len(conn.execute(stmt).all())
    return added


def _touch_runs(
    conn: Connection,
    runs: dict[str, RunRow],
    merged: list[dict[tuple[str, str, str, int], _Merged]],
    now: float,
) -> None:
    """Last activity and last step of every run the batches touched, in one statement."""
    if not runs:
        return
    last_step: dict[str, int] = {}
    for part in merged:
        for m in part.values():
            last_step[m.run_id] = max(m.step, last_step.get(m.run_id, -1))
    params = {
        "now": now,
        "pks": [row.pk for row in runs.values()],
        "steps": [last_step.get(run_id) for run_id in runs],
    }
    conn.execute(_TOUCH_RUNS, params)


_TOUCH_RUNS = sa.text(
    "UPDATE runs SET last_seen = :now, "
    "last_step = CASE WHEN v.step IS NULL THEN runs.last_step "
    "ELSE greatest(coalesce(runs.last_step, -1), v.step) END "
    "FROM (SELECT unnest(CAST(:pks AS BIGINT[])) AS pk, "
    "unnest(CAST(:steps AS BIGINT[])) AS step) AS v "
    "WHERE runs.pk = v.pk"
)


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
