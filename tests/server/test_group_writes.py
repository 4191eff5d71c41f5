"""Several batches written in one transaction give what writing them one by one gives, and one
bad batch of a group fails alone."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from server.domain.records import Batch, BatchWrite, WriteResult
from server.errors import NotFound
from server.storage.db import Database
from server.storage.writing.commits import commit_together
from server.storage.writing.ingest import write_batches
from tests.factories import bucket_table, ingest_batch, record, run_upsert


def _write(body: dict[str, Any]) -> BatchWrite:
    """A payload as storage takes it from an open server's ingest service."""
    batch: Batch = ingest_batch(body)
    return BatchWrite(batch.run, batch.records, batch.annotations)


def _batches(run_id: str) -> list[BatchWrite]:
    table = bucket_table([1.0, 2.0, 3.0])
    bodies: list[dict[str, Any]] = [
        {
            "run": run_upsert(run_id),
            "records": [
                record(run_id, 0, {"a": 1.0, "b": 2.0}, buckets=[table]),
                record(run_id, 1, {"a": 1.5, "b": float("nan")}),
            ],
        },
        {  # step 1 again with one new metric, step 2 new, step 0's buckets again
            "records": [
                record(run_id, 1, {"b": 9.0, "c": 3.0}),
                record(run_id, 2, {"a": 4.0}),
                record(run_id, 0, {}, buckets=[table]),
            ]
        },
        {"records": [record(run_id, 0, {"a": 7.0, "b": 7.0})]},  # nothing new
    ]
    return [_write(body) for body in bodies]


def _outcome(results: list[WriteResult]) -> list[tuple[int, int, int]]:
    return [(r.accepted, r.duplicates, r.values) for r in results]


def _stored(db: Database, run_id: str) -> list[tuple[Any, ...]]:
    with db.read() as conn:
        points = conn.execute(
            sa.text(
                "SELECT s.metric, p.step, p.value FROM "
                "(SELECT series_id, step, value FROM points_hot UNION ALL "
                "SELECT series_id, step, value FROM points) AS p "
                "JOIN series s ON s.id = p.series_id JOIN runs r ON r.pk = s.run_pk "
                "WHERE r.id = :run ORDER BY 1, 2"
            ),
            {"run": run_id},
        ).all()
        buckets = conn.execute(
            sa.text(
                "SELECT count(*) FROM (SELECT run_pk FROM bucket_hot UNION ALL "
                "SELECT run_pk FROM bucket_rows) AS b JOIN runs r ON r.pk = b.run_pk "
                "WHERE r.id = :run"
            ),
            {"run": run_id},
        ).scalar_one()
        last_step = conn.execute(
            sa.text("SELECT last_step FROM runs WHERE id = :run"), {"run": run_id}
        ).scalar_one()
    return [*(tuple(p) for p in points), ("buckets", buckets), ("last_step", last_step)]


def test_group_equals_one_by_one(migrated_db: Database) -> None:
    db = migrated_db
    with db.write() as conn:
        together = write_batches(conn, db, _batches("grouped"))
    alone = []
    for b in _batches("alone"):
        with db.write() as conn:
            alone += write_batches(conn, db, [b])

    assert _outcome(together) == _outcome(alone) == [(2, 0, 4), (2, 1, 2), (0, 1, 0)]
    assert [r.stored[0].metrics for r in together[1:2]] == [{"c": 3.0}]
    stored = _stored(db, "grouped")
    assert repr(stored) == repr(_stored(db, "alone"))  # repr: NaN equals NaN
    assert stored[-2:] == [("buckets", 3), ("last_step", 2)]
    assert [(m, s) for m, s, _ in stored[:-2]] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
        ("c", 1),
    ]


def test_a_bad_batch_in_a_group_fails_alone_and_the_others_are_stored(
    migrated_db: Database,
) -> None:
    db = migrated_db
    first, *rest = _batches("kept")
    bad = _write({"records": [record("nowhere", 0, {"a": 1.0})]})
    outcomes = commit_together(db, [first, bad, *rest])
    assert isinstance(outcomes[1], NotFound)
    written = [o for o in outcomes if isinstance(o, WriteResult)]
    assert _outcome(written) == [(2, 0, 4), (2, 1, 2), (0, 1, 0)]
    for b in _batches("alone"):
        with db.write() as conn:
            write_batches(conn, db, [b])
    assert repr(_stored(db, "kept")) == repr(_stored(db, "alone"))  # repr: NaN equals NaN


def test_a_batch_naming_a_run_created_later_in_the_group_fails(migrated_db: Database) -> None:
    db = migrated_db
    needs_run = _write({"records": [record("later", 0, {"a": 1.0})]})
    creates_run = _write({"run": run_upsert("later"), "records": []})
    with pytest.raises(NotFound, match="unknown run 'later'"), db.write() as conn:
        write_batches(conn, db, [needs_run, creates_run])
    with db.read() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one() == 0


def _exemplar_batches(run_id: str) -> list[BatchWrite]:
    def ex(kind: str, pos: int, lt: float) -> dict[str, Any]:
        return {"kind": kind, "seq": 0, "pos": pos, "rollout_logprob": -1.0, "trainer_logprob": lt}

    bodies: list[dict[str, Any]] = [
        {
            "run": run_upsert(run_id),
            "records": [record(run_id, 0, {"a": 1.0}, exemplars=[ex("top", 0, -2.0)])],
        },
        {  # the same step: its stored exemplar again (a different value), and a new one
            "records": [
                record(run_id, 0, {}, exemplars=[ex("top", 0, -9.0), ex("uniform", 0, -1.5)])
            ]
        },
        {"records": [record(run_id, 0, {"a": 5.0}, exemplars=[ex("uniform", 0, -7.0)])]},
    ]
    return [_write(body) for body in bodies]


def test_group_stores_exemplars_as_one_by_one_does(migrated_db: Database) -> None:
    db = migrated_db
    with db.write() as conn:
        together = write_batches(conn, db, _exemplar_batches("grouped"))
    alone = []
    for b in _exemplar_batches("alone"):
        with db.write() as conn:
            alone += write_batches(conn, db, [b])
    assert _outcome(together) == _outcome(alone) == [(1, 0, 1), (1, 0, 0), (0, 1, 0)]
    query = (
        "SELECT e.kind, e.trainer_logprob FROM exemplars e JOIN runs r ON r.pk = e.run_pk "
        "WHERE r.id = :run ORDER BY 1"
    )
    with db.read() as conn:
        grouped = conn.execute(sa.text(query), {"run": "grouped"}).all()
        one_by_one = conn.execute(sa.text(query), {"run": "alone"}).all()
    assert [tuple(r) for r in grouped] == [tuple(r) for r in one_by_one]
    assert [tuple(r) for r in grouped] == [("top", -2.0), ("uniform", -1.5)]
