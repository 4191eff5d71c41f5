"""Alarm persistence: rules, receivers, silences, states, alerts and the outbox."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.alarms import tables as t
from server.alarms.defaults import PACK
from server.alarms.rules import Rule
from server.errors import NotFound
from server.storage.db import Database


@contextmanager
def _transaction(db: Database, conn: Connection | None) -> Iterator[Connection]:
    """The caller's transaction when there is one, else a new write transaction."""
    if conn is not None:
        yield conn
    else:
        with db.write() as new:
            yield new


def rule_from_row(row: Any) -> Rule:
    return Rule(
        id=row.id,
        project=row.project,
        name=row.name,
        kind=row.kind,
        metric=row.metric,
        source=row.source,
        run_id=row.run_id,
        label=row.label,
        gpu=row.gpu,
        severity=row.severity,
        params=json.loads(row.params),
        enabled=bool(row.enabled),
    )


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "project": rule.project,
        "name": rule.name,
        "kind": rule.kind,
        "metric": rule.metric,
        "source": rule.source,
        "run_id": rule.run_id,
        "label": rule.label,
        "gpu": rule.gpu,
        "severity": rule.severity,
        "params": rule.params,
        "enabled": rule.enabled,
    }


class AlarmStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- rules ------------------------------------------------------------------------------
    def rules(self, project: str | None = None) -> list[Rule]:
        query = sa.select(t.rules)
        if project is not None:
            query = query.where(t.rules.c.project == project)
        with self.db.read() as conn:
            return [
                rule_from_row(r)
                for r in conn.execute(query.order_by(t.rules.c.project, t.rules.c.name))
            ]

    def save_rule(self, rule: Rule) -> Rule:
        values = rule_dict(rule)
        values["params"] = json.dumps(rule.params)
        values["updated_at"] = time.time()
        with self.db.write() as conn:
            conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule.id))
            conn.execute(sa.insert(t.rules).values(**values))
            conn.execute(
                sa.delete(t.states).where(t.states.c.rule_id == rule.id)
            )  # re-evaluate afresh
        return rule

    def delete_rule(self, rule_id: str) -> None:
        with self.db.write() as conn:
            if not conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule_id)).rowcount:
                raise NotFound(f"no rule {rule_id!r}")
            conn.execute(sa.delete(t.states).where(t.states.c.rule_id == rule_id))

    def seed_defaults(self, project: str) -> list[Rule]:
        """Install the default pack for a project that has no rules yet."""
        with self.db.read() as conn:
            if conn.execute(
                sa.select(t.rules.c.id).where(t.rules.c.project == project).limit(1)
            ).first():
                return []
        made = []
        for spec in PACK:
            rule = Rule(id=f"r_{uuid.uuid4().hex[:12]}", project=project, **spec)
            made.append(self.save_rule(rule))
        return made

    # -- receivers and silences -------------------------------------------------------------
    def receivers(self, project: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(t.receivers)
        if project is not None:
            query = query.where(t.receivers.c.project == project)
        with self.db.read() as conn:
            return [
                dict(r._mapping) for r in conn.execute(query.order_by(t.receivers.c.created_at))
            ]

    def receiver(self, receiver_id: str) -> dict[str, Any]:
        with self.db.read() as conn:
            row = conn.execute(
                sa.select(t.receivers).where(t.receivers.c.id == receiver_id)
            ).first()
        if row is None:
            raise NotFound(f"no receiver {receiver_id!r}; list them with `mismatch receiver list`")
        return dict(row._mapping)

    def add_receiver(
        self, *, project: str, url: str, fmt: str, secret: str | None
    ) -> dict[str, Any]:
        row = {
            "id": f"rcv_{uuid.uuid4().hex[:12]}",
            "project": project,
            "url": url,
            "format": fmt,
            "secret": secret,
            "created_at": time.time(),
        }
        with self.db.write() as conn:
            conn.execute(sa.insert(t.receivers).values(**row))
        return row

    def delete(self, table: sa.Table, item_id: str) -> None:
        with self.db.write() as conn:
            if not conn.execute(sa.delete(table).where(table.c.id == item_id)).rowcount:
                raise NotFound(f"no {table.name.removeprefix('alarm_').rstrip('s')} {item_id!r}")

    def silences(
        self, project: str | None = None, *, active_at: float | None = None
    ) -> list[dict[str, Any]]:
        query = sa.select(t.silences)
        if project is not None:
            query = query.where(t.silences.c.project == project)
        if active_at is not None:
            query = query.where(t.silences.c.until > active_at)
        with self.db.read() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def add_silence(
        self,
        *,
        project: str,
        until: float,
        rule_id: str | None,
        run_id: str | None,
        label: str | None,
        comment: str,
    ) -> dict[str, Any]:
        row = {
            "id": f"sil_{uuid.uuid4().hex[:12]}",
            "project": project,
            "rule_id": rule_id,
            "run_id": run_id,
            "label": label,
            "until": until,
            "comment": comment,
            "created_at": time.time(),
        }
        with self.db.write() as conn:
            conn.execute(sa.insert(t.silences).values(**row))
        return row

    # -- states, alerts, outbox -------------------------------------------------------------
    def load_states(self) -> dict[tuple[str, str], dict[str, Any]]:
        with self.db.read() as conn:
            return {
                (r.rule_id, r.series): json.loads(r.state)
                for r in conn.execute(sa.select(t.states))
            }

    def save_states(
        self, states: dict[tuple[str, str], dict[str, Any]], conn: Connection | None = None
    ) -> None:
        if not states:
            return
        now = time.time()
        rows = [
            {"rule_id": k[0], "series": k[1], "state": json.dumps(v), "updated_at": now}
            for k, v in states.items()
        ]
        with _transaction(self.db, conn) as c:
            stmt = pg_insert(t.states).values(rows)
            stmt = stmt.on_conflict_do_update(
                index_elements=["rule_id", "series"],
                set_={"state": stmt.excluded.state, "updated_at": stmt.excluded.updated_at},
            )
            c.execute(stmt)

    @contextmanager
    def locked(self, names: Sequence[str], *, wait: bool = True) -> Iterator[Connection | None]:
        """A transaction holding PostgreSQL advisory locks on `names` (series, or a task), so
        that replicas sharing the database take turns on them; taken in sorted order, so two
        replicas never wait on each other in a cycle. Yields None when `wait` is False and
        another replica holds one of them."""
        with self.db.write() as conn:
            for name in sorted(set(names)):
                lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
                got = conn.execute(sa.select(getattr(sa.func, lock)(sa.func.hashtext(name))))
                if not wait and not got.scalar_one():
                    yield None
                    return
            yield conn

    def states_of(
        self, conn: Connection, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """The stored states of `keys` (those stored), read inside the caller's transaction."""
        if not keys:
            return {}
        c = t.states.c
        query = sa.select(c.rule_id, c.series, c.state).where(
            sa.tuple_(c.rule_id, c.series).in_(sorted(set(keys)))
        )
        return {(r.rule_id, r.series): json.loads(r.state) for r in conn.execute(query)}

    def record(
        self,
        opened: Sequence[dict[str, Any]],
        closed: Sequence[dict[str, Any]],
        messages: Sequence[dict[str, Any]],
        conn: Connection | None = None,
    ) -> None:
        """Alert transitions and their outbox messages, in one transaction (the caller's, when
        given: then they commit together with the states that led to them)."""
        with _transaction(self.db, conn) as conn:
            for alert in opened:
                conn.execute(sa.insert(t.alerts).values(**alert))
            for alert in closed:
                conn.execute(
                    sa.update(t.alerts)
                    .where(t.alerts.c.id == alert["id"])
                    .values(
                        state="resolved",
                        resolved_at=alert["resolved_at"],
                        resolved_step=alert["resolved_step"],
                    )
                )
            for message in messages:
                conn.execute(
                    pg_insert(t.outbox)
                    .values(**message)
                    .on_conflict_do_nothing(index_elements=["id"])
                )

    def alert(self, alert_id: str) -> dict[str, Any] | None:
        with self.db.read() as conn:
            row = conn.execute(sa.select(t.alerts).where(t.alerts.c.id == alert_id)).first()
        return dict(row._mapping) if row else None

    def alerts(
        self,
        *,
        project: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        projects: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[dict[str, Any]]:
        c = t.alerts.c
        query = sa.select(t.alerts)
        if project is not None:
            query = query.where(c.project == project)
        if projects is not None:
            query = query.where(c.project.in_(list(projects)))
        if run_id is not None:
            query = query.where(c.run_id == run_id)
        if state is not None:
            query = query.where(c.state == state)
        with self.db.read() as conn:
            return [
                dict(r._mapping)
                for r in conn.execute(query.order_by(c.started_at.desc()).limit(limit))
            ]
