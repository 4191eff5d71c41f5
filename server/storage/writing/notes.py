"""Run annotations: free-text events (warnings, weight updates), idempotent by id."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.records import Annotation
from server.storage.schema import tables as t

CHUNK = 1000


def chunks(items: list[Any], size: int = CHUNK) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def write(
    conn: Connection, run_pks: Mapping[str, int], annotations: Sequence[Annotation], now: float
) -> int:
    """Store annotations; returns how many were new (an id re-sent for the same run changes
    nothing; ids are unique within a run, so another project cannot take one first)."""
    values = [
        {
            "id": a.id or uuid.uuid4().hex,
            "run_pk": run_pks[a.run_id],
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
    for chunk in chunks(values):
        stmt = (
            pg_insert(t.run_annotations)
            .values(chunk)
            .on_conflict_do_nothing(index_elements=["run_pk", "id"])
            .returning(t.run_annotations.c.id)
        )
        added += len(conn.execute(stmt).all())
    return added


def rows(conn: Connection, run_pk: int, limit: int = 1000) -> list[Any]:
    a = t.run_annotations.c
    query = (
        sa.select(a.id, a.step, a.time, a.kind, a.source, a.actor, a.text)
        .where(a.run_pk == run_pk)
        .order_by(a.time, a.id)
        .limit(limit)
    )
    return list(conn.execute(query).all())
