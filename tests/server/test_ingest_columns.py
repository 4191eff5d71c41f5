"""A batch decoded into one column of values is stored as the models' dicts are: the same values,
outcomes and heads, grouped or one by one, on both databases; its values reach the database as a
view of that column, and large batches are never grouped."""

from __future__ import annotations

import json
import math
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from server.domain.metric_rows import MetricColumn
from server.domain.records import BatchWrite, Record, WriteResult
from server.schemas.batches import parse_batch
from server.storage.db import Database
from server.storage.writing import commits, heads
from server.storage.writing.commits import GroupCommit
from server.storage.writing.ingest import _merge, write_batches
from server.storage.writing.point_columns import PointColumns
from tests.factories import bucket_table, ingest_batch, record, run_upsert


def _bodies(run_id: str) -> list[dict[str, Any]]:
    table = bucket_table([1.0, 2.0, 3.0])
    return [
        {
            "run": run_upsert(run_id),
            "records": [
                record(run_id, 0, {"a": 1.0, "b": 2.0}, buckets=[table]),
                record(run_id, 1, {"a": 1.5, "b": "nan"}),
                record(run_id, 1, {"c": -0.5, "a": 8.0}),  # the same step again: merged
                record(run_id, 3, {"b": "-inf", "a": 0.25}),  # other names, other order
            ],
        },
        {  # step 1 again with one new metric, step 2 new, step 0's buckets again
            "records": [
                record(run_id, 1, {"b": 9.0, "d": 3.0}),
                record(run_id, 2, {"a": 4.0, "b": 5.0}),
                record(run_id, 0, {}, buckets=[table]),
            ]
        },
        {"records": [record(run_id, 0, {"a": 7.0, "b": 7.0})]},  # nothing new
    ]


def _wire(body: dict[str, Any]) -> BatchWrite:
    batch = parse_batch(json.dumps(body).encode())
    assert all(type(r.metrics).__name__ == "MetricRow" for r in batch.records)  # the wire path
    return BatchWrite(batch.run, batch.records, batch.annotations)


def _models(body: dict[str, Any]) -> BatchWrite:
    batch = ingest_batch(body)
    assert all(isinstance(r.metrics, dict) for r in batch.records)
    return BatchWrite(batch.run, batch.records, batch.annotations)


def _stored(db: Database, run_id: str) -> list[Any]:
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
        heads = conn.execute(
            sa.text(
                "SELECT s.metric, s.points, s.first_step, s.last_step, s.last_value, s.nan, "
                "s.pos_inf, s.neg_inf FROM series s JOIN runs r ON r.pk = s.run_pk "
                "WHERE r.id = :run ORDER BY 1"
            ),
            {"run": run_id},
        ).all()
    return [repr(tuple(p)) for p in points] + [repr(tuple(h)) for h in heads]  # NaN by repr


def _outcome(results: list[WriteResult]) -> list[tuple[int, int, int, list[dict[str, float]]]]:
    return [
        (
            r.accepted,
            r.duplicates,
            r.values,
            [{k: repr(v) for k, v in s.metrics.items()} for s in r.stored],  # type: ignore[misc]
        )
        for r in results
    ]


@pytest.mark.parametrize("fold_rows", [heads.FOLD_ROWS, 2])
def test_a_decoded_batch_is_stored_as_the_models_dicts_are_grouped_or_alone(
    migrated_db: Database, fold_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heads, "FOLD_ROWS", fold_rows)  # heads folded in one go, or in pieces
    db = migrated_db
    outcomes = {}
    for name, parse in (("wire", _wire), ("models", _models)):
        for grouped in (True, False):
            run_id = f"{name}-{'grouped' if grouped else 'alone'}"
            batches = [parse(body) for body in _bodies(run_id)]
            results: list[WriteResult] = []
            for part in [batches] if grouped else [[b] for b in batches]:
                with db.write() as conn:
                    results += write_batches(conn, db, part)
            outcomes[run_id] = (_outcome(results), _stored(db, run_id))
    first, *others = outcomes.values()
    assert all(other == first for other in others), outcomes
    results, stored = first
    assert [r[:3] for r in results] == [(3, 0, 7), (2, 1, 3), (0, 1, 0)]
    assert results[0][3][1] == {"a": "1.5", "b": "nan", "c": "-0.5"}  # merged, first value kept
    # series b holds 2.0, nan, 5.0 and -inf at steps 0-3: its head, counted by hand
    assert "('b', 4, 0, 3, -inf, 1, 0, 1)" in stored


def test_a_merged_record_leaves_the_decoded_rows_as_they_were() -> None:
    batch = _wire(_bodies("r")[0])
    before = repr([dict(r.metrics) for r in batch.records])
    merged = _merge(batch.records, now=0.0)
    step_1 = merged[("r", "trainer", "trainer-0", 1)].metrics
    assert repr(dict(step_1)) == repr({"a": 1.5, "b": math.nan, "c": -0.5})
    assert repr([dict(r.metrics) for r in batch.records]) == before


def test_the_rows_of_one_batch_reach_storage_as_a_view_of_its_column() -> None:
    column = MetricColumn()
    rows = [column.add(("x", "y"), [float(i), -float(i)]) for i in range(100)]
    rows.append(column.add(("y",), [0.5]))
    ids = {(1, "trainer", "0", "x"): 7, (1, "trainer", "0", "y"): 9}
    points = PointColumns(ids)
    for step, row in enumerate(rows):
        points.add_row((1, "trainer", "0"), step, 1000.0 + step, row)
    points.add((1, "trainer", "0"), 500, 2000.0, {"x": 3.0})  # a dict: an array of its own
    built = points.build()

    want = [(7 if n == "x" else 9, s, r[n], 1000.0 + s) for s, r in enumerate(rows) for n in r]
    want.append((7, 500, 3.0, 2000.0))
    got = list(zip(*(column.tolist() for column in built.spelled(slice(None))), strict=True))
    assert got == want
    assert built.slots.dtype == built.records.dtype == np.int32  # 8 bytes a value beside it
    alone = PointColumns(ids)
    for step, row in enumerate(rows):
        alone.add_row((1, "trainer", "0"), step, 0.0, row)
    assert np.shares_memory(alone.build().values, np.frombuffer(column.values))  # no copy


def _job(values: int) -> commits._Job:
    records = [Record("r", 0, "trainer", "0", None, None, None, {"a": 1.0})]
    return commits._Job(BatchWrite(None, records), Future(), values)


def test_small_batches_commit_together_and_large_ones_alone(monkeypatch: Any) -> None:
    committer = GroupCommit.__new__(GroupCommit)
    committed: list[list[int]] = []
    monkeypatch.setattr(
        committer, "_commit_group", lambda group: committed.append([j.values for j in group])
    )
    committer._jobs = commits.queue.SimpleQueue()
    limit = commits.MAX_GROUP_VALUES
    for values in (100, 200, limit, 50, 60, limit * 3, 10):
        committer._jobs.put(_job(values))
    held = None
    while not committer._jobs.empty() or held is not None:
        held, stop = committer._write_group(held)
        assert not stop
    assert committed == [[100, 200], [limit], [50, 60], [limit * 3], [10]]
