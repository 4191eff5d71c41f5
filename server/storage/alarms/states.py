"""Alarm states and stream cursors: what evaluation keeps between batches.

A state row is (rule id, series text) → JSON; `StateKey.series_text`/`parse` are its codec, so
nothing else reads or writes the text. A stream's cursor (`Cursor`: how far it was evaluated) is
one more row, under the rule id `CURSORS`, and is saved in the same statement as the states it
goes with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.alarm_keys import Cursor, StateKey, StreamKey
from server.storage.schema import alarm_tables as t
from server.storage.schema import tables

CURSORS = "!cursor"  # no rule id starts with "!"
States = dict[StateKey, dict[str, Any]]
Cursors = dict[StreamKey, Cursor]


def _cursor(text: str, state: str) -> tuple[StreamKey, Cursor] | None:
    stream = StreamKey.parse(text)
    if stream is None:
        return None
    found = json.loads(state)
    return stream, Cursor(int(found["through"]), int(found.get("generation", 0)))


def _rows(conn: Connection, where: sa.ColumnElement[bool] | None) -> tuple[States, Cursors]:
    s, r = t.states.c, t.rules.c
    query = sa.select(s.rule_id, s.series, s.state, r.project).select_from(
        t.states.join(t.rules, r.id == s.rule_id, isouter=True)
    )
    states: States = {}
    cursors: Cursors = {}
    for row in conn.execute(query if where is None else query.where(where)):
        if row.rule_id == CURSORS:
            found = _cursor(row.series, row.state)
            if found is not None:
                cursors[found[0]] = found[1]
        elif row.project is not None:  # a state of a rule that is gone is not read back
            key = StateKey.parse(row.rule_id, row.project, row.series)
            if key is not None:
                states[key] = json.loads(row.state)
    return states, cursors


def load_all(conn: Connection) -> tuple[States, Cursors]:
    """Every state and cursor (one process owns a DuckDB file: it keeps them in memory)."""
    return _rows(conn, None)


def load(
    conn: Connection, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
) -> tuple[States, Cursors]:
    """The stored states of `keys` and the cursors of `streams` (those stored)."""
    s = t.states.c
    keyset = set(keys)
    wanted = sorted({(k.rule_id, k.series_text()) for k in keyset})
    wanted += sorted({(CURSORS, stream.text()) for stream in streams})
    if not wanted:
        return {}, {}
    states, cursors = _rows(conn, sa.tuple_(s.rule_id, s.series).in_(wanted))
    return {k: v for k, v in states.items() if k in keyset}, cursors


def load_streams(conn: Connection, streams: Collection[StreamKey]) -> tuple[States, Cursors]:
    """Every stored state that reads one of `streams`, with their cursors."""
    if not streams:
        return {}, {}
    s, r = t.states.c, t.rules.c
    clauses = []
    for stream in streams:
        base = StateKey.of_stream(CURSORS, stream).series_text()  # a metric's state adds "|…"
        clauses.append(
            sa.and_(
                r.project == stream.project,
                sa.or_(s.series == base, s.series.startswith(base + "|", autoescape=True)),
            )
        )
        clauses.append(sa.and_(s.rule_id == CURSORS, s.series == stream.text()))
    wanted = set(streams)
    states, cursors = _rows(conn, sa.or_(*clauses))
    return {k: v for k, v in states.items() if k.stream in wanted}, cursors


def save(
    conn: Connection, states: Mapping[StateKey, Any], cursors: Mapping[StreamKey, Cursor]
) -> None:
    """Insert or replace states and cursors, in the caller's transaction."""
    now = time.time()
    rows = [
        {"rule_id": k.rule_id, "series": k.series_text(), "state": json.dumps(v), "updated_at": now}
        for k, v in states.items()
    ]
    rows += [
        {
            "rule_id": CURSORS,
            "series": stream.text(),
            "state": json.dumps({"through": c.through, "generation": c.generation}),
            "updated_at": now,
        }
        for stream, c in cursors.items()
    ]
    if not rows:
        return
    stmt = pg_insert(t.states).values(rows)
    stmt = stmt.on_conflict_do_update(
        index_elements=["rule_id", "series"],
        set_={"state": stmt.excluded.state, "updated_at": stmt.excluded.updated_at},
    )
    conn.execute(stmt)


def stored_heads(
    conn: Connection, *, seen_after: float, seen_before: float
) -> list[tuple[StreamKey, str, int]]:
    """(stream, metric, last stored step) of the series of runs last seen (server time)
    between `seen_after` and `seen_before`: where streams stand, to compare with their cursors."""
    s, r = tables.series.c, tables.runs.c
    query = (
        sa.select(r.project, r.id, s.source, s.actor, s.metric, s.last_step)
        .select_from(tables.series.join(tables.runs, r.pk == s.run_pk))
        .where(
            r.last_seen > seen_after,
            r.last_seen <= seen_before,
            s.last_step.is_not(None),
        )
    )
    return [
        (StreamKey(row.project, row.id, row.source, row.actor), row.metric, int(row.last_step))
        for row in conn.execute(query)
    ]


def stored_between(conn: Connection, stream: StreamKey, after: int, before: int) -> bool:
    """Whether the stream stored a step strictly between `after` and `before` (one probe of the
    step records' key)."""
    sr, r = tables.step_records.c, tables.runs.c
    query = (
        sa.select(sr.step)
        .select_from(tables.step_records.join(tables.runs, r.pk == sr.run_pk))
        .where(
            r.project == stream.project,
            r.id == stream.run_id,
            sr.source == stream.source,
            sr.actor == stream.actor,
            sr.step > after,
            sr.step < before,
        )
        .limit(1)
    )
    return conn.execute(query).first() is not None
