"""Rule packs a project received: the receipt and the pack's rules in one transaction.

A project is given the default pack once, whichever way it was made; the receipt is what makes
it once, on one server or across replicas sharing PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from server.domain.alarms import Rule
from server.domain.scopes import ALL_PROJECTS
from server.storage.db import Database
from server.storage.schema import alarm_tables as t
from server.storage.schema import tables as st


def receive(db: Database, project: str, pack: str, rules: Sequence[Rule]) -> list[Rule]:
    """Give `project` the rules of `pack` unless it received that pack before; returns the rules
    saved (none the second time). The receipt's key decides: of two replicas seeding one new
    project, one writes the rules and the other nothing."""
    now = time.time()
    receipt = (
        pg_insert(t.project_packs)
        .values(project=project, pack=pack, received_at=now)
        .on_conflict_do_nothing(index_elements=["project", "pack"])
        .returning(t.project_packs.c.project)
    )
    with db.write() as conn:
        if conn.execute(receipt).first() is None:
            return []
        for rule in rules:
            values = {
                **dataclasses.asdict(rule),
                "params": json.dumps(dict(rule.params)),
                "updated_at": now,
            }
            conn.execute(sa.insert(t.rules).values(**values))
    return list(rules)


def pending(db: Database, pack: str) -> list[str]:
    """Projects the database knows (from runs, tokens or rules) that never received `pack`."""
    known = sa.union(
        sa.select(st.projects.c.name.label("project")),
        sa.select(st.tokens.c.project.label("project")).where(st.tokens.c.project != ALL_PROJECTS),
        sa.select(t.rules.c.project.label("project")),
    ).subquery()
    received = sa.select(t.project_packs.c.project).where(t.project_packs.c.pack == pack)
    query = sa.select(known.c.project).where(known.c.project.not_in(received)).distinct()
    with db.read() as conn:
        return sorted(str(row[0]) for row in conn.execute(query))
