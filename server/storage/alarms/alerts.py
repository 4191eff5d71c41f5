"""Alerts as stored: opened, ended, corrected or withdrawn by the alarm recorder, read by the API,
the dashboard and the incident grouping.

Alert ids are decided by evaluation from what fired (`server.alarms.ids.alert_for`), so writing
the same alert twice — a batch evaluated again after a restart — inserts nothing the second time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.alarm_keys import StreamKey
from server.domain.alarms import Alert
from server.storage.db import hold_locks
from server.storage.schema import alarm_tables as t

_a = t.alerts.c


def insert(conn: Connection, alerts: Sequence[Alert]) -> None:
    """New alerts; one whose id is stored already is left as it is."""
    for alert in alerts:
        conn.execute(
            pg_insert(t.alerts)
            .values(**dataclasses.asdict(alert))
            .on_conflict_do_nothing(index_elements=["id"])
        )


def end(conn: Connection, alerts: Sequence[Alert]) -> None:
    """Alerts that ended (resolved or without data): their state and where they ended."""
    for alert in alerts:
        conn.execute(
            sa.update(t.alerts)
            .where(_a.id == alert.id)
            .values(
                state=alert.state,
                resolved_at=alert.resolved_at,
                resolved_step=alert.resolved_step,
            )
        )


def correct(conn: Connection, alerts: Sequence[Alert]) -> None:
    """Alerts as evaluating their stream again decided them: what fired and how it ended."""
    for alert in alerts:
        conn.execute(
            sa.update(t.alerts)
            .where(_a.id == alert.id)
            .values(
                metric=alert.metric,
                value=alert.value,
                threshold=alert.threshold,
                state=alert.state,
                resolved_at=alert.resolved_at,
                resolved_step=alert.resolved_step,
            )
        )


def withdraw(conn: Connection, alert_ids: Collection[str]) -> None:
    """Delete alerts that evaluating their stream again no longer raises."""
    if alert_ids:
        conn.execute(sa.delete(t.alerts).where(_a.id.in_(sorted(alert_ids))))


def by_ids(conn: Connection, alert_ids: Collection[str]) -> dict[str, Alert]:
    if not alert_ids:
        return {}
    rows = conn.execute(sa.select(t.alerts).where(_a.id.in_(sorted(set(alert_ids)))))
    return {row.id: Alert(**row._mapping) for row in rows}


def of_stream_since(conn: Connection, stream: StreamKey, step: int) -> list[Alert]:
    """The alerts of a stream that fired at `step` or later, or were open at `step`."""
    query = sa.select(t.alerts).where(
        _a.project == stream.project,
        _a.run_id == stream.run_id,
        _a.source == stream.source,
        _a.actor == stream.actor,
        sa.or_(_a.step >= step, _a.state == "firing", _a.resolved_step >= step),
    )
    return [Alert(**row._mapping) for row in conn.execute(query)]


def open_by_run(
    conn: Connection, runs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], list[Alert]]:
    """The firing alerts of these (project, run) pairs."""
    if not runs:
        return {}
    query = sa.select(t.alerts).where(
        _a.state == "firing", _a.run_id.in_(sorted({run for _, run in runs}))
    )
    wanted = set(runs)
    out: dict[tuple[str, str], list[Alert]] = {}
    for row in conn.execute(query):
        alert = Alert(**row._mapping)
        if (alert.project, alert.run_id) in wanted:
            out.setdefault((alert.project, alert.run_id), []).append(alert)
    return out


def of_incidents(conn: Connection, incident_ids: Sequence[str]) -> dict[str, list[Alert]]:
    """The alerts of these incidents; an alert from before incidents is one of its own."""
    if not incident_ids:
        return {}
    ids = sorted(set(incident_ids))
    query = sa.select(t.alerts).where(
        sa.or_(_a.incident_id.in_(ids), sa.and_(_a.incident_id.is_(None), _a.id.in_(ids)))
    )
    out: dict[str, list[Alert]] = {}
    for row in conn.execute(query):
        alert = Alert(**row._mapping)
        out.setdefault(alert.incident_id or alert.id, []).append(alert)
    return out


def lock_runs(conn: Connection, runs: Sequence[tuple[str, str]]) -> None:
    """PostgreSQL: the runs' incidents are decided by one replica at a time (a lock in the
    caller's transaction, taken after its stream locks, in sorted order)."""
    hold_locks(conn, [f"incident:{project}|{run}" for project, run in runs])


def alert(conn: Connection, alert_id: str) -> Alert | None:
    row = conn.execute(sa.select(t.alerts).where(_a.id == alert_id)).first()
    return Alert(**row._mapping) if row else None


def alerts(
    conn: Connection,
    *,
    project: str | None = None,
    run_id: str | None = None,
    state: str | None = None,
    projects: Sequence[str] | None = None,
    limit: int = 500,
) -> list[Alert]:
    query = sa.select(t.alerts)
    if project is not None:
        query = query.where(_a.project == project)
    if projects is not None:
        query = query.where(_a.project.in_(list(projects)))
    if run_id is not None:
        query = query.where(_a.run_id == run_id)
    if state is not None:
        query = query.where(_a.state == state)
    rows = conn.execute(query.order_by(_a.started_at.desc()).limit(limit))
    return [Alert(**r._mapping) for r in rows]


def firing_counts(conn: Connection) -> dict[str, int]:
    """Open alerts per run, counted in the database."""
    query = (
        sa.select(_a.run_id, sa.func.count().label("n"))
        .where(_a.state == "firing")
        .group_by(_a.run_id)
    )
    return {r.run_id: int(r.n) for r in conn.execute(query)}
