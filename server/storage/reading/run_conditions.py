"""The runs list's conditions on what a run is and did (`server.domain.run_filters`) in SQL:
status, GPU type, config values, last activity. Each reads the run's row or its actor
segments, never values."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import ColumnElement

from server.domain.names import ENDED
from server.domain.run_filters import ConfigMatch, RunConditions
from server.storage import sql
from server.storage.schema import tables as t


def where(
    dialect: str, conditions: RunConditions, live_since: float | None
) -> list[ColumnElement[bool]]:
    """`conditions` as predicates on `runs`. A run is live when it has not ended and sent a
    step at or after `live_since`, idle when it has not ended and is not live (the statuses the
    runs list shows)."""
    r = t.runs.c
    out: list[ColumnElement[bool]] = []
    if conditions.statuses:
        out.append(sa.or_(*(_status_is(s, live_since) for s in conditions.statuses)))
    if conditions.gpu is not None:
        a = t.actors.c
        pattern = sql.like_pattern(conditions.gpu.lower())
        out.append(
            sa.exists().where(a.run_pk == r.pk, sa.func.lower(a.gpu).like(pattern, escape="\\"))
        )
    out += [_config_is(dialect, match) for match in conditions.config]
    active = sa.func.coalesce(r.last_seen, r.created_at)
    if conditions.since is not None:
        out.append(active >= conditions.since)
    if conditions.until is not None:
        out.append(active <= conditions.until)
    return out


def _status_is(status: str, live_since: float | None) -> ColumnElement[bool]:
    r = t.runs.c
    if status in ENDED:
        return r.status == status
    running = r.status.not_in(list(ENDED))
    if live_since is None:  # no window: nothing counts as live
        return running if status == "idle" else sa.false()
    if status == "live":
        return sa.and_(running, r.last_seen >= live_since, r.last_step.is_not(None))
    return sa.and_(
        running, sa.or_(r.last_seen.is_(None), r.last_seen < live_since, r.last_step.is_(None))
    )


def _config_is(dialect: str, match: ConfigMatch) -> ColumnElement[bool]:
    kind, text = sql.json_scalar_at(dialect, t.runs.c.config, match.key)
    value: Any = match.value
    if value is None:
        return kind == "null"
    if isinstance(value, bool):
        return sa.and_(kind == "boolean", text == ("true" if value else "false"))
    if isinstance(value, (int, float)):
        number = sa.case((kind == "number", sa.cast(text, sa.Float(53))))
        return number == float(value)
    return sa.and_(kind == "string", text == value)
