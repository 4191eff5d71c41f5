"""Token exemplars: a bounded set of tokens per step record, kept as evidence of a mismatch.

Rows are keyed by (run, step, source, actor, kind, seq, pos) and inserted with
`ON CONFLICT DO NOTHING … RETURNING`, so a re-sent exemplar changes nothing and the database
says which records gained one. They are rare (opt-in, at most the schema's limit per record), so
the ingest path pays nothing for records without them and one statement per chunk for the rest.
Reads rank by |d| = |trainer_logprob - rollout_logprob|, largest first: NaN sorts above +Inf on
both databases (see `sql.py`), so a non-finite token, the worst evidence there is, comes first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.domain.records import Exemplar, RecordKey
from server.storage.schema import tables as t
from server.storage.writing.notes import chunks

CHUNK = 4000  # 12 parameters a row: PostgreSQL takes at most 65,535 in one statement
ExemplarKey = tuple[
    int, int, str, str, str, int, int
]  # run pk, step, source, actor, kind, seq, pos


@dataclass(frozen=True, slots=True)
class ExemplarFilter:
    """Which exemplars of a run a read returns."""

    step_min: int | None = None
    step_max: int | None = None
    kind: str | None = None
    limit: int = 1000


def rows_of(key: RecordKey, exemplars: Iterable[Exemplar]) -> list[dict[str, Any]]:
    """The table rows of one record's exemplars (key: run pk, source, actor, step)."""
    run_pk, source, actor, step = key
    return [
        {
            "run_pk": run_pk,
            "step": step,
            "source": source,
            "actor": actor,
            "kind": e.kind,
            "seq": e.seq,
            "pos": e.pos,
            "rollout_logprob": e.rollout_logprob,
            "trainer_logprob": e.trainer_logprob,
            "token_id": e.token_id,
            "token": e.token,
            "context": e.context,
        }
        for e in exemplars
    ]


def key_of(row: dict[str, Any]) -> ExemplarKey:
    return (
        row["run_pk"],
        row["step"],
        row["source"],
        row["actor"],
        row["kind"],
        row["seq"],
        row["pos"],
    )


def write(conn: Connection, rows: Sequence[dict[str, Any]]) -> set[ExemplarKey]:
    """Insert exemplar rows, skipping stored keys (and later repeats of a key within `rows`:
    the first wins, as for metric values); return the keys that were new."""
    unique: dict[ExemplarKey, dict[str, Any]] = {}
    for row in rows:
        unique.setdefault(key_of(row), row)
    e = t.exemplars.c
    added: set[ExemplarKey] = set()
    for chunk in chunks(list(unique.values()), CHUNK):
        stmt = (
            pg_insert(t.exemplars)
            .values(chunk)
            .on_conflict_do_nothing()
            .returning(e.run_pk, e.step, e.source, e.actor, e.kind, e.seq, e.pos)
        )
        added.update((r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in conn.execute(stmt))
    return added


def read(conn: Connection, run_pk: int, wanted: ExemplarFilter) -> list[Any]:
    """A run's exemplars, largest |d| first (non-finite first), then in key order."""
    e = t.exemplars.c
    d = sa.func.abs(e.trainer_logprob - e.rollout_logprob)
    query = sa.select(
        e.step,
        e.source,
        e.actor,
        e.kind,
        e.seq,
        e.pos,
        e.rollout_logprob,
        e.trainer_logprob,
        e.token_id,
        e.token,
        e.context,
    ).where(e.run_pk == run_pk)
    if wanted.step_min is not None:
        query = query.where(e.step >= wanted.step_min)
    if wanted.step_max is not None:
        query = query.where(e.step <= wanted.step_max)
    if wanted.kind is not None:
        query = query.where(e.kind == wanted.kind)
    order = (d.desc(), e.step, e.source, e.actor, e.kind, e.seq, e.pos)
    return list(conn.execute(query.order_by(*order).limit(wanted.limit)).all())


def delete_run(conn: Connection, run_pk: int) -> int:
    """Drop a run's exemplars (retention: they are raw per-token data); returns how many."""
    result = conn.execute(sa.delete(t.exemplars).where(t.exemplars.c.run_pk == run_pk))
    return int(result.rowcount or 0)
