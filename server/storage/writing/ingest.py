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

import time as _time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from server.domain.metric_rows import MetricRow
from server.domain.records import (
    BatchWrite,
    BucketTable,
    Exemplar,
    Record,
    RecordKey,
    StoredRecord,
    WriteResult,
)
from server.errors import Conflict, NotFound
from server.storage.db import Database
from server.storage.writing import appends, exemplars, heads, notes, runs
from server.storage.writing.point_columns import PointColumns, series_keys

MergeKey = tuple[str, str, str, int]  # (run id, source, actor, step)


@dataclass(slots=True)
class _Merged:
    """Records of one batch merged by key: two records for the same step add their metrics.
    `metrics`, `buckets` and `exemplars` are the first record's own (not copied) until a second
    one adds to them."""

    run_id: str
    source: str
    actor: str
    step: int
    time: float
    gpu: str | None
    weight_version: int | None
    metrics: Mapping[str, float]
    buckets: Sequence[BucketTable]
    exemplars: Sequence[Exemplar]
    merged: bool = False


@dataclass(slots=True)
class _Columns:
    """What a group of batches appends: points as columns (`PointColumns`), bucket rows as
    dicts."""

    points: PointColumns
    bucket_rows: list[dict[str, Any]] = field(default_factory=list)


def write_batches(
    conn: Connection, db: Database, batches: Sequence[BatchWrite], *, now: float | None = None
) -> list[WriteResult]:
    """Store several batches in the caller's transaction with one statement per table.

    The outcome is what writing them one after another would give (a key sent by two batches is
    new for the first and a duplicate for the second), but the fixed cost of each statement is
    paid once for the group. Any invalid batch raises and the caller's transaction stores nothing.
    """
    now = _time.time() if now is None else now
    wanted: set[str] = set()
    for batch in batches:
        wanted |= _run_ids(batch)
    loaded = runs.load(conn, wanted)
    checked = [_check_batch(conn, batch, loaded, now) for batch in batches]
    results = [result for result, _ in checked]
    refs = [batch_refs for _, batch_refs in checked]
    merged = [_merge(batch.records, now) for batch in batches]
    if any(merged):
        _write_records(conn, db, refs, merged, results)
    for batch, batch_refs, result in zip(batches, refs, results, strict=True):
        if batch.annotations:
            pks = {run_id: ref.pk for run_id, ref in batch_refs.items()}
            result.annotations = notes.write(conn, pks, batch.annotations, now)
    last_steps: dict[int, int | None] = {
        ref.pk: None for batch_refs in refs for ref in batch_refs.values()
    }
    for part, batch_refs in zip(merged, refs, strict=True):
        for m in part.values():
            pk = batch_refs[m.run_id].pk
            last_steps[pk] = max(m.step, last_steps[pk] or -1)
    runs.touch(conn, last_steps, now)
    said = [b.run for b in batches]
    if any(r is not None and r.status is not None for r in said) or any(
        ref.ended for batch_refs in refs for ref in batch_refs.values()
    ):  # only a run that ended, or is said to, can change how it stands
        logged = [{m.run_id for m in part.values()} for part in merged]
        runs.reopen_logging(conn, said, logged, refs)
    return results


def _run_ids(batch: BatchWrite) -> set[str]:
    ids = {r.run_id for r in batch.records} | {a.run_id for a in batch.annotations}
    if batch.run is not None:
        ids.add(batch.run.id)
    return ids


def _check_batch(
    conn: Connection, batch: BatchWrite, loaded: dict[str, list[runs.RunRef]], now: float
) -> tuple[WriteResult, dict[str, runs.RunRef]]:
    """Create or update the batch's run, then find every run it names in the batch's project.

    Run ids are per project: a batch writes into one project (its token's, or its run's), and a
    run of the same id elsewhere is as unknown to it as a missing one, so the answer never tells
    which ids other projects use. Without a project (an open server or a server-admin token) an
    id must name one run. Runs are checked in batch order, so a batch naming a run that only a
    later batch creates fails as it would alone."""
    result = WriteResult()
    project = _project_of(batch, loaded)
    refs: dict[str, runs.RunRef] = {}
    if batch.run is not None:
        target = project or batch.default_project
        existing = _find(loaded, batch.run.id, target)
        ref = runs.upsert(conn, batch.run, existing[0] if existing else None, target, now)
        if ref.created:
            loaded.setdefault(ref.id, []).append(ref)
            if runs.ensure_project(conn, ref.project, now):
                result.new_projects.append(ref.project)
        refs[ref.id] = ref
        project = ref.project
    for run_id in sorted(_run_ids(batch) - refs.keys()):
        found = _find(loaded, run_id, project)
        if not found:
            raise NotFound(
                f"unknown run {run_id!r}: send a `run` object with this id in the batch "
                '(e.g. {"run": {"id": "' + run_id + '", "project": "default"}, '
                '"records": [...]}) to create it',
                detail={"unknown_runs": [run_id]},
            )
        if len(found) > 1:
            raise _ambiguous(run_id, found)
        refs[run_id] = found[0]
    return result, refs


def _project_of(batch: BatchWrite, loaded: dict[str, list[runs.RunRef]]) -> str | None:
    """The one project the batch writes into, when it says or its run's id decides it."""
    if batch.project is not None:
        return batch.project
    if batch.run is None:
        return None
    if batch.run.project is not None:
        return batch.run.project
    found = loaded.get(batch.run.id, [])
    if len(found) > 1:
        raise _ambiguous(batch.run.id, found)
    return found[0].project if found else None


def _find(
    loaded: dict[str, list[runs.RunRef]], run_id: str, project: str | None
) -> list[runs.RunRef]:
    return [r for r in loaded.get(run_id, ()) if project is None or r.project == project]


def _ambiguous(run_id: str, found: list[runs.RunRef]) -> Conflict:
    """Only a caller that may write every project gets here, so naming them leaks nothing."""
    projects = ", ".join(sorted(r.project for r in found))
    return Conflict(
        f"run id {run_id!r} is used in projects {projects}: name the project in the batch "
        '({"project": ..., "records": [...]}, as mismatch-collectors 0.1 and later do with '
        "every batch), or in its `run` object, or use a token of that project"
    )


def _merge(records: Sequence[Record], now: float) -> dict[MergeKey, _Merged]:
    merged: dict[MergeKey, _Merged] = {}
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
                rec.metrics,
                rec.buckets,
                rec.exemplars,
            )
            continue
        # a copy of its own before it adds another record's metrics to the first one's
        metrics = seen.metrics if seen.merged and isinstance(seen.metrics, dict) else None
        if metrics is None:
            metrics = dict(seen.metrics)
            seen.metrics, seen.merged = metrics, True
        for name, value in rec.metrics.items():
            metrics.setdefault(name, value)
        seen.buckets = [*seen.buckets, *rec.buckets]
        seen.exemplars = [*seen.exemplars, *rec.exemplars]
        seen.gpu = seen.gpu or rec.gpu
        if seen.weight_version is None:
            seen.weight_version = rec.weight_version
    return merged


def _write_records(
    conn: Connection,
    db: Database,
    refs: list[dict[str, runs.RunRef]],
    merged: list[dict[MergeKey, _Merged]],
    results: list[WriteResult],
) -> None:
    """Append the step records and values of every batch; count each batch's outcome.

    The first batch that names a key owns its step record. A key named by several batches of
    the group is tracked value by value, so the later batches store only what is still missing.
    """
    keyed = [
        [((batch_refs[m.run_id].pk, m.source, m.actor, m.step), m) for m in part.values()]
        for part, batch_refs in zip(merged, refs, strict=True)
    ]
    owners, shared = _owners(keyed)
    new_keys = appends.step_records(
        conn, db, [(key, m.time, m.gpu, m.weight_version) for key, m in owners.items()]
    )
    heads.update_actors(
        conn, [(key, m.time, m.gpu) for key, m in owners.items() if key in new_keys]
    )
    names = series_keys((key[:3], m.metrics) for part in keyed for key, m in part)
    series_ids = appends.series_ids(conn, db, names)
    old = [
        (key, m) for part in keyed for key, m in part if key not in new_keys or owners[key] is not m
    ]
    stored = (
        appends.stored_pairs(
            conn, [(series_ids[(*key[:3], n)], key[3]) for key, m in old for n in m.metrics]
        )
        if old
        else set()
    )
    stored_buckets = (
        appends.stored_bucket_keys(conn, [key for key, m in old if m.buckets]) if old else set()
    )
    gained = _write_exemplars(conn, keyed)
    columns = _Columns(PointColumns(series_ids))
    for index, (part, batch_refs, result) in enumerate(zip(keyed, refs, results, strict=True)):
        before = columns.points.size
        for key, m in part:
            is_new = key in new_keys and owners[key] is m
            fresh, added_buckets = _collect(
                key,
                m,
                series_ids,
                columns,
                stored,
                stored_buckets,
                is_new=is_new,
                track=key in shared,
            )
            if is_new or fresh or added_buckets or (index, key) in gained:
                result.accepted += 1
            else:
                result.duplicates += 1
            if fresh:
                ref = batch_refs[m.run_id]
                result.stored.append(
                    StoredRecord(
                        m.run_id,
                        ref.project,
                        ref.labels,
                        m.source,
                        m.actor,
                        m.step,
                        m.time,
                        m.gpu,
                        m.weight_version,
                        fresh,
                        joins_stored=not is_new,
                    )
                )
        result.values = columns.points.size - before
    _append(conn, db, columns)


def _write_exemplars(
    conn: Connection, keyed: list[list[tuple[RecordKey, _Merged]]]
) -> set[tuple[int, RecordKey]]:
    """Store the group's token exemplars; return (batch index, record key) of the records that
    added one. An exemplar several batches of the group send belongs to the first of them, as
    one-by-one writes would have it. Most records carry none: then this reads and writes
    nothing."""
    owner: dict[exemplars.ExemplarKey, tuple[int, RecordKey]] = {}
    rows = []
    for index, part in enumerate(keyed):
        for key, m in part:
            if not m.exemplars:
                continue
            for row in exemplars.rows_of(key, m.exemplars):
                if owner.setdefault(exemplars.key_of(row), (index, key)) == (index, key):
                    rows.append(row)
    if not rows:
        return set()
    return {owner[added] for added in exemplars.write(conn, rows)}


def _append(conn: Connection, db: Database, c: _Columns) -> None:
    """What a group of batches stores: values (and their series' heads), bucket rows."""
    if c.points.size:
        points = c.points.build()
        appends.points(conn, db, points)
        heads.update_series(conn, points)
    if c.bucket_rows:
        appends.bucket_rows(conn, c.bucket_rows)


def _owners(
    keyed: list[list[tuple[RecordKey, _Merged]]],
) -> tuple[dict[RecordKey, _Merged], set[RecordKey]]:
    """The first record of the group for each key (it owns the step record), and the keys that
    several batches of the group name."""
    owners: dict[RecordKey, _Merged] = {}
    shared: set[RecordKey] = set()
    for part in keyed:
        for key, m in part:
            if key in owners:
                shared.add(key)
            else:
                owners[key] = m
    return owners, shared


def _collect(
    key: RecordKey,
    m: _Merged,
    series_ids: dict[tuple[int, str, str, str], int],
    columns: _Columns,
    stored: set[tuple[int, int]],
    stored_buckets: set[tuple[RecordKey, str]],
    *,
    is_new: bool,
    track: bool,
) -> tuple[Mapping[str, float], bool]:
    """Add one merged record's new values and bucket rows to the columns; returns the values it
    added and whether it added bucket rows. `track`: the key is shared by several batches of the
    group, so what this one adds counts as stored for the later ones."""
    base = key[:3]
    fresh: Mapping[str, float]
    if is_new and not track:  # the common case: every value is new, a record at a time
        fresh = m.metrics
        if isinstance(fresh, MetricRow):
            columns.points.add_row(base, m.step, m.time, fresh)
        else:
            columns.points.add(base, m.step, m.time, fresh)
    else:
        kept: dict[str, float] = {}
        for name, value in m.metrics.items():
            pair = (series_ids[(*base, name)], m.step)
            if not is_new and pair in stored:
                continue
            if track:
                stored.add(pair)
            kept[name] = value
        columns.points.add(base, m.step, m.time, kept)
        fresh = kept
    added = False
    for table in m.buckets:
        if not is_new and (key, table.basis) in stored_buckets:
            continue
        if track:
            stored_buckets.add((key, table.basis))
        columns.bucket_rows.extend(appends.bucket_table_rows(key, table))
        added = True
    return fresh, added
