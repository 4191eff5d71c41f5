"""Alarm persistence: rules, receivers, silences, states, alerts and the outbox.

Rows travel as the domain's types (`Rule`, `Receiver`, `Silence`, `Alert`); the outbox, which
only the delivery worker reads, as `OutboxMessage`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.alarms import Alert, Receiver, Rule, Silence, StateKey
from server.errors import NotFound
from server.storage import alarm_tables as t
from server.storage.db import Database


@dataclass(frozen=True)
class OutboxMessage:
    """One webhook body for one receiver, as the outbox keeps it until delivered."""

    id: str
    receiver_id: str
    body: str
    created_at: float
    attempts: int = 0
    next_attempt_at: float = 0.0
    lease_until: float | None = None
    delivered_at: float | None = None
    gave_up_at: float | None = None
    last_status: int | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class Fold:
    """A follow-up folded into a message still waiting to go out (its body replaced), or, when
    that message has left already, `fallback` sent instead (None: nothing)."""

    message_id: str
    body: str
    fallback: OutboxMessage | None = None


@contextmanager
def _reading(db: Database, conn: Connection | None) -> Iterator[Connection]:
    """The caller's transaction when there is one (it sees what it wrote), else a read."""
    if conn is not None:
        yield conn
    else:
        with db.read() as new:
            yield new


@contextmanager
def _transaction(db: Database, conn: Connection | None) -> Iterator[Connection]:
    """The caller's transaction when there is one, else a new write transaction."""
    if conn is not None:
        yield conn
    else:
        with db.write() as new:
            yield new


def _rule(row: Any) -> Rule:
    values = dict(row._mapping)
    values.pop("updated_at", None)
    return Rule(
        **{**values, "params": json.loads(values["params"]), "enabled": bool(values["enabled"])}
    )


def missing(kind: str) -> NotFound:
    """The one answer for a rule, receiver or silence id that does not exist or lies in a
    project the caller may not see: the same words and status either way, and no echo of the
    id, so an answer never tells another project's id apart from a made-up one."""
    return NotFound(f"no {kind} with this id; list them with `mismatch {kind} list`")


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
                _rule(r) for r in conn.execute(query.order_by(t.rules.c.project, t.rules.c.name))
            ]

    def rule(self, rule_id: str) -> Rule:
        with self.db.read() as conn:
            row = conn.execute(sa.select(t.rules).where(t.rules.c.id == rule_id)).first()
        if row is None:
            raise missing("rule")
        return _rule(row)

    def has_rules(self, project: str) -> bool:
        with self.db.read() as conn:
            query = sa.select(t.rules.c.id).where(t.rules.c.project == project).limit(1)
            return conn.execute(query).first() is not None

    def save_rule(self, rule: Rule) -> Rule:
        """Insert or replace a rule; its series' states start afresh."""
        values = {
            **dataclasses.asdict(rule),
            "params": json.dumps(dict(rule.params)),
            "updated_at": time.time(),
        }
        with self.db.write() as conn:
            conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule.id))
            conn.execute(sa.insert(t.rules).values(**values))
            conn.execute(sa.delete(t.states).where(t.states.c.rule_id == rule.id))
        return rule

    def delete_rule(self, rule_id: str) -> None:
        with self.db.write() as conn:
            if not conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule_id)).rowcount:
                raise missing("rule")
            conn.execute(sa.delete(t.states).where(t.states.c.rule_id == rule_id))

    # -- receivers and silences -------------------------------------------------------------
    def receivers(self, project: str | None = None) -> list[Receiver]:
        query = sa.select(t.receivers)
        if project is not None:
            query = query.where(t.receivers.c.project == project)
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(t.receivers.c.created_at))
            return [Receiver(**r._mapping) for r in rows]

    def receiver(self, receiver_id: str) -> Receiver:
        with self.db.read() as conn:
            row = conn.execute(
                sa.select(t.receivers).where(t.receivers.c.id == receiver_id)
            ).first()
        if row is None:
            raise missing("receiver")
        return Receiver(**row._mapping)

    def add_receiver(self, receiver: Receiver) -> Receiver:
        with self.db.write() as conn:
            conn.execute(sa.insert(t.receivers).values(**dataclasses.asdict(receiver)))
        return receiver

    def silences(
        self, project: str | None = None, *, active_at: float | None = None
    ) -> list[Silence]:
        query = sa.select(t.silences)
        if project is not None:
            query = query.where(t.silences.c.project == project)
        if active_at is not None:
            query = query.where(t.silences.c.until > active_at)
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(t.silences.c.created_at))
            return [Silence(**r._mapping) for r in rows]

    def silence(self, silence_id: str) -> Silence:
        with self.db.read() as conn:
            row = conn.execute(sa.select(t.silences).where(t.silences.c.id == silence_id)).first()
        if row is None:
            raise missing("silence")
        return Silence(**row._mapping)

    def add_silence(self, silence: Silence) -> Silence:
        with self.db.write() as conn:
            conn.execute(sa.insert(t.silences).values(**dataclasses.asdict(silence)))
        return silence

    def delete(self, table: sa.Table, item_id: str) -> None:
        with self.db.write() as conn:
            if not conn.execute(sa.delete(table).where(table.c.id == item_id)).rowcount:
                raise missing(table.name.removeprefix("alarm_").rstrip("s"))

    # -- states -----------------------------------------------------------------------------
    def load_states(self) -> dict[StateKey, dict[str, Any]]:
        with self.db.read() as conn:
            return {
                (r.rule_id, r.series): json.loads(r.state)
                for r in conn.execute(sa.select(t.states))
            }

    def save_states(
        self, states: dict[StateKey, dict[str, Any]], conn: Connection | None = None
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
        self, conn: Connection, keys: Sequence[StateKey]
    ) -> dict[StateKey, dict[str, Any]]:
        """The stored states of `keys` (those stored), read inside the caller's transaction."""
        if not keys:
            return {}
        c = t.states.c
        query = sa.select(c.rule_id, c.series, c.state).where(
            sa.tuple_(c.rule_id, c.series).in_(sorted(set(keys)))
        )
        return {(r.rule_id, r.series): json.loads(r.state) for r in conn.execute(query)}

    # -- alerts and the outbox --------------------------------------------------------------
    def record(
        self,
        opened: Sequence[Alert],
        closed: Sequence[Alert],
        messages: Sequence[OutboxMessage],
        conn: Connection | None = None,
        folds: Sequence[Fold] = (),
    ) -> None:
        """Alert transitions and their outbox messages, in one transaction (the caller's, when
        given: then they commit together with the states that led to them)."""
        with _transaction(self.db, conn) as conn:
            messages = [*messages, *self._fold(conn, folds)]
            for alert in opened:
                conn.execute(sa.insert(t.alerts).values(**dataclasses.asdict(alert)))
            for alert in closed:
                conn.execute(
                    sa.update(t.alerts)
                    .where(t.alerts.c.id == alert.id)
                    .values(
                        state=alert.state,
                        resolved_at=alert.resolved_at,
                        resolved_step=alert.resolved_step,
                    )
                )
            for message in messages:
                conn.execute(
                    pg_insert(t.outbox)
                    .values(**dataclasses.asdict(message))
                    .on_conflict_do_nothing(index_elements=["id"])
                )

    def _fold(self, conn: Connection, folds: Sequence[Fold]) -> list[OutboxMessage]:
        """Replace the bodies of messages not yet tried; the fallbacks of those already gone."""
        o = t.outbox.c
        waiting = sa.and_(
            o.attempts == 0,
            o.lease_until.is_(None),
            o.delivered_at.is_(None),
            o.gave_up_at.is_(None),
        )
        fallbacks = []
        for fold in folds:
            updated = conn.execute(
                sa.update(t.outbox).where(o.id == fold.message_id, waiting).values(body=fold.body)
            ).rowcount
            if not updated and fold.fallback is not None:
                fallbacks.append(fold.fallback)
        return fallbacks

    def open_alerts(
        self, runs: Sequence[tuple[str, str]], conn: Connection | None = None
    ) -> dict[tuple[str, str], list[Alert]]:
        """The firing alerts of these (project, run) pairs."""
        if not runs:
            return {}
        c = t.alerts.c
        query = sa.select(t.alerts).where(
            c.state == "firing", c.run_id.in_(sorted({run for _, run in runs}))
        )
        wanted = set(runs)
        out: dict[tuple[str, str], list[Alert]] = {}
        with _reading(self.db, conn) as c_:
            for row in c_.execute(query):
                alert = Alert(**row._mapping)
                if (alert.project, alert.run_id) in wanted:
                    out.setdefault((alert.project, alert.run_id), []).append(alert)
        return out

    def incident_alerts(
        self, incident_ids: Sequence[str], conn: Connection | None = None
    ) -> dict[str, list[Alert]]:
        """The alerts of these incidents; an alert from before incidents is one of its own."""
        if not incident_ids:
            return {}
        c = t.alerts.c
        ids = sorted(set(incident_ids))
        query = sa.select(t.alerts).where(
            sa.or_(c.incident_id.in_(ids), sa.and_(c.incident_id.is_(None), c.id.in_(ids)))
        )
        out: dict[str, list[Alert]] = {}
        with _reading(self.db, conn) as c_:
            for row in c_.execute(query):
                alert = Alert(**row._mapping)
                out.setdefault(alert.incident_id or alert.id, []).append(alert)
        return out

    def lock_runs(self, conn: Connection, runs: Sequence[tuple[str, str]]) -> None:
        """With PostgreSQL, the runs' incidents are decided by one replica at a time (a lock in
        the caller's transaction, taken after its series locks, in sorted order)."""
        if self.db.is_duckdb:
            return
        for project, run in sorted(set(runs)):
            lock = sa.func.pg_advisory_xact_lock(sa.func.hashtext(f"incident:{project}|{run}"))
            conn.execute(sa.select(lock))

    def alert(self, alert_id: str) -> Alert | None:
        with self.db.read() as conn:
            row = conn.execute(sa.select(t.alerts).where(t.alerts.c.id == alert_id)).first()
        return Alert(**row._mapping) if row else None

    def alerts(
        self,
        *,
        project: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        projects: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[Alert]:
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
            rows = conn.execute(query.order_by(c.started_at.desc()).limit(limit))
            return [Alert(**r._mapping) for r in rows]

    def firing_counts(self) -> dict[str, int]:
        """Open alerts per run, counted in the database."""
        c = t.alerts.c
        query = (
            sa.select(c.run_id, sa.func.count().label("n"))
            .where(c.state == "firing")
            .group_by(c.run_id)
        )
        with self.db.read() as conn:
            return {r.run_id: int(r.n) for r in conn.execute(query)}
