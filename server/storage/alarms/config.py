"""Alarm configuration rows: rules, receivers and silences, as the domain's types.

A rule saved or deleted takes its states with it (they were built by its old parameters); a
missing id is the caller's business (None or False here, `NotFound` in the alarm service).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.alarms import Receiver, Rule, Silence
from server.storage.schema import alarm_tables as t

Owned = Literal["rule", "receiver", "silence"]
_TABLES = {"rule": t.rules, "receiver": t.receivers, "silence": t.silences}


def _rule(row: Any) -> Rule:
    values = dict(row._mapping)
    values.pop("updated_at", None)
    return Rule(
        **{**values, "params": json.loads(values["params"]), "enabled": bool(values["enabled"])}
    )


def rules(conn: Connection, project: str | None = None) -> list[Rule]:
    query = sa.select(t.rules)
    if project is not None:
        query = query.where(t.rules.c.project == project)
    return [_rule(r) for r in conn.execute(query.order_by(t.rules.c.project, t.rules.c.name))]


def rule(conn: Connection, rule_id: str) -> Rule | None:
    row = conn.execute(sa.select(t.rules).where(t.rules.c.id == rule_id)).first()
    return None if row is None else _rule(row)


def has_rules(conn: Connection, project: str) -> bool:
    query = sa.select(t.rules.c.id).where(t.rules.c.project == project).limit(1)
    return conn.execute(query).first() is not None


def save_rule(conn: Connection, rule: Rule) -> None:
    """Insert or replace a rule; its series' states start afresh."""
    values = {
        **dataclasses.asdict(rule),
        "params": json.dumps(dict(rule.params)),
        "updated_at": time.time(),
    }
    conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule.id))
    conn.execute(sa.insert(t.rules).values(**values))
    conn.execute(sa.delete(t.states).where(t.states.c.rule_id == rule.id))


def delete_rule(conn: Connection, rule_id: str) -> bool:
    """False when there was no such rule."""
    if not conn.execute(sa.delete(t.rules).where(t.rules.c.id == rule_id)).rowcount:
        return False
    conn.execute(sa.delete(t.states).where(t.states.c.rule_id == rule_id))
    return True


def receivers(conn: Connection, project: str | None = None) -> list[Receiver]:
    query = sa.select(t.receivers)
    if project is not None:
        query = query.where(t.receivers.c.project == project)
    return [Receiver(**r._mapping) for r in conn.execute(query.order_by(t.receivers.c.created_at))]


def receiver(conn: Connection, receiver_id: str) -> Receiver | None:
    row = conn.execute(sa.select(t.receivers).where(t.receivers.c.id == receiver_id)).first()
    return None if row is None else Receiver(**row._mapping)


def add_receiver(conn: Connection, receiver: Receiver) -> None:
    conn.execute(sa.insert(t.receivers).values(**dataclasses.asdict(receiver)))


def silences(
    conn: Connection, project: str | None = None, *, active_at: float | None = None
) -> list[Silence]:
    query = sa.select(t.silences)
    if project is not None:
        query = query.where(t.silences.c.project == project)
    if active_at is not None:
        query = query.where(t.silences.c.until > active_at)
    return [Silence(**r._mapping) for r in conn.execute(query.order_by(t.silences.c.created_at))]


def silence(conn: Connection, silence_id: str) -> Silence | None:
    row = conn.execute(sa.select(t.silences).where(t.silences.c.id == silence_id)).first()
    return None if row is None else Silence(**row._mapping)


def add_silence(conn: Connection, silence: Silence) -> None:
    conn.execute(sa.insert(t.silences).values(**dataclasses.asdict(silence)))


def delete(conn: Connection, kind: Literal["receiver", "silence"], item_id: str) -> bool:
    """Delete a receiver or a silence; False when there was no such row."""
    table = _TABLES[kind]
    return bool(conn.execute(sa.delete(table).where(table.c.id == item_id)).rowcount)
