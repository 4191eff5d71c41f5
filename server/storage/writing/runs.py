"""The runs table as the write path keeps it: runs created and updated as batches name them
(their rows read back for the readers in `server.storage.reading.runs`).

A run is keyed by its project and its client-chosen `id` (two projects may use the same id);
`pk` is the small integer the other tables use.
JSON documents (tags, labels, config) are stored as text and parsed here, so the same code runs
on both databases.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain import run_labels
from server.domain.names import DEFAULT_RUN_KIND, ENDED
from server.domain.records import RunUpsert
from server.storage.schema import tables as t


@dataclass(frozen=True, slots=True)
class RunRef:
    """A run as the write path needs it: its keys, project and labels."""

    pk: int
    id: str
    project: str
    labels: Mapping[str, str]
    created: bool = False
    status: str = "running"

    @property
    def ended(self) -> bool:
        return self.status in ENDED


def load(conn: Connection, run_ids: Iterable[str]) -> dict[str, list[RunRef]]:
    """The runs of each id, in every project (the caller decides which one a batch means)."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    r = t.runs.c
    rows = conn.execute(
        sa.select(r.pk, r.id, r.project, r.labels, r.status)
        .where(r.id.in_(ids))
        .order_by(r.project)
    ).all()
    found: dict[str, list[RunRef]] = {}
    for row in rows:
        ref = RunRef(row.pk, row.id, row.project, json.loads(row.labels), status=row.status)
        found.setdefault(row.id, []).append(ref)
    return found


def upsert(
    conn: Connection, run: RunUpsert, existing: RunRef | None, project: str, now: float
) -> RunRef:
    """Create the run in `project`, or apply the given fields to `existing` (its run there)."""
    if existing is None:
        return _create(conn, run, project, now)
    updates: dict[str, Any] = {}
    if run.name is not None:
        updates["name"] = run.name
    if run.tags is not None:
        updates["tags"] = json.dumps(list(run.tags))
    if run.status is not None:
        updates["status"] = run.status
    if run.kind is not None:
        updates["kind"] = run.kind
    derived = run_labels.derived_of(existing.labels)
    if run.config:
        stored = conn.execute(
            sa.select(t.runs.c.config).where(t.runs.c.pk == existing.pk)
        ).scalar_one()
        merged = {**json.loads(stored), **run.config}
        updates["config"] = dumps(merged)
        derived = run_labels.derived_labels(merged)
    labels = run_labels.with_derived(
        run.labels if run.labels is not None else existing.labels, derived
    )
    if labels != existing.labels:
        updates["labels"] = json.dumps(labels)
    if updates:
        conn.execute(sa.update(t.runs).where(t.runs.c.pk == existing.pk).values(**updates))
    status = run.status or existing.status
    return RunRef(existing.pk, existing.id, existing.project, labels, status=status)


def reopen_logging(
    conn: Connection,
    upserts: Sequence[RunUpsert | None],
    logged: Sequence[set[str]],
    refs: Sequence[Mapping[str, RunRef]],
) -> None:
    """A run that said it ended and logs steps again is running again, unless the batch says
    how it stands itself (an import stores a finished run's steps with its end). Per batch of
    a group, in order: its run upsert, the run ids it logged steps for, its runs; steps sent
    before a run's end leave it ended."""
    ended: dict[int, bool] = {}  # run pk → ended, as the batches so far leave it
    reopened: set[int] = set()
    for run, run_ids, batch_refs in zip(upserts, logged, refs, strict=True):
        said = run.id if run is not None and run.status is not None else None
        if said is not None:
            pk = batch_refs[said].pk
            ended[pk] = batch_refs[said].ended
            reopened.discard(pk)
        for run_id in run_ids - {said}:
            ref = batch_refs[run_id]
            if ended.get(ref.pk, ref.ended):
                ended[ref.pk] = False
                reopened.add(ref.pk)
    if reopened:
        reopen(conn, reopened)


def reopen(conn: Connection, pks: Iterable[int]) -> None:
    """Runs that said they ended and log steps again are running again (a resumed job)."""
    wanted = sorted(set(pks))
    if wanted:
        r = t.runs.c
        conn.execute(
            sa.update(t.runs).where(r.pk.in_(wanted), r.status.in_(ENDED)).values(status="running")
        )


def _create(conn: Connection, run: RunUpsert, project: str, now: float) -> RunRef:
    values = {
        "id": run.id,
        "project": project,
        "name": run.name or run.id,
        "tags": json.dumps(list(run.tags or [])),
        "labels": json.dumps(
            run_labels.with_derived(run.labels or {}, run_labels.derived_labels(run.config or {}))
        ),
        "config": dumps(run.config or {}),
        "status": run.status or "running",
        "kind": run.kind or DEFAULT_RUN_KIND,
        "created_at": now,
        "last_seen": now,
    }
    created = conn.execute(
        pg_insert(t.runs)
        .values(values)
        .on_conflict_do_nothing(index_elements=["project", "id"])
        .returning(t.runs.c.pk)
    ).first()
    r = t.runs.c
    row = conn.execute(
        sa.select(r.pk, r.labels).where(r.project == project, r.id == run.id)
    ).one()  # a concurrent writer may have created it first: then this is its row
    return RunRef(
        row.pk,
        run.id,
        project,
        json.loads(row.labels),
        created=created is not None,
        status=run.status or "running",
    )


def dumps(document: Any) -> str:
    """JSON text for a config; values JSON cannot hold (dates, paths) are stored as strings."""
    return json.dumps(document, default=str, allow_nan=True)


def ensure_project(conn: Connection, project: str, now: float) -> bool:
    """Record a project; True when it is new."""
    stmt = (
        pg_insert(t.projects)
        .values(name=project, created_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
        .returning(t.projects.c.name)
    )
    return conn.execute(stmt).first() is not None


_TOUCH = sa.text(
    "UPDATE runs SET last_seen = :now, "
    "last_step = CASE WHEN v.step IS NULL THEN runs.last_step "
    "ELSE greatest(coalesce(runs.last_step, -1), v.step) END "
    "FROM (SELECT unnest(CAST(:pks AS BIGINT[])) AS pk, "
    "unnest(CAST(:steps AS BIGINT[])) AS step) AS v "
    "WHERE runs.pk = v.pk"
)


def touch(conn: Connection, last_steps: Mapping[int, int | None], now: float) -> None:
    """Last activity and last step of every run a group of batches touched, in one statement."""
    if last_steps:
        conn.execute(
            _TOUCH, {"now": now, "pks": list(last_steps), "steps": list(last_steps.values())}
        )
