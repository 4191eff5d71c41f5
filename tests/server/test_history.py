"""Heads, rollups and retention hold exactly what a full scan of the raw values gives.

Values are sent as trainers send them — in random batches, some twice, some out of order, with
NaN and ±Inf, from several writers at once — and everything kept at ingest or by compaction is
checked against an independent NumPy computation over the values that were sent.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.writing import compaction, retention
from tests.factories import ingest_batch

STEPS = 700
RUNS = ("h1", "h2", "h3")
METRICS = ("k3_kl", "grad_norm")

EVERY = ReadScope.EVERY


def _value(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.02:
        return math.nan
    if roll < 0.03:
        return math.inf
    if roll < 0.04:
        return -math.inf
    return rng.lognormvariate(-7, 1)


@pytest.fixture
def history(
    migrated_db: Database,
) -> tuple[Database, dict[tuple[str, str], dict[int, float]]]:
    """Three runs written by three threads in shuffled, overlapping batches; returns what was
    stored (the first value sent for each step wins, as the server keeps it)."""
    rng = random.Random(7)
    sent = {run: {m: {s: _value(rng) for s in range(STEPS)} for m in METRICS} for run in RUNS}
    ingest = IngestService(migrated_db)
    for run in RUNS:
        ingest.ingest(ingest_batch({"run": {"id": run}}), OPEN)

    def writer(run: str) -> None:
        local = random.Random(run)
        steps = list(range(STEPS))
        local.shuffle(steps)  # out of order
        steps += local.sample(range(STEPS), 150)  # some sent twice
        for i in range(0, len(steps), 37):
            records = [
                {
                    "run_id": run,
                    "step": s,
                    "source": "trainer",
                    "actor": "t0",
                    "time": 1e9 + s,
                    "gpu": "H20",
                    "metrics": {m: sent[run][m][s] for m in METRICS},
                }
                for s in steps[i : i + 37]
            ]
            ingest.ingest(ingest_batch({"records": records}), OPEN)
            if local.random() < 0.2:
                compaction.compact(migrated_db)  # part compacted, part hot, interleaved

    threads = [threading.Thread(target=writer, args=(run,)) for run in RUNS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ingest.close()
    return migrated_db, {(run, m): sent[run][m] for run in RUNS for m in METRICS}


def _series(db: Database) -> dict[tuple[str, str], Any]:
    with db.read() as conn:
        rows = conn.execute(
            sa.text("SELECT r.id AS run, s.* FROM series s JOIN runs r ON r.pk = s.run_pk")
        ).all()
    return {(r.run, r.metric): r for r in rows}


def test_heads_equal_a_full_scan(history: Any) -> None:
    db, stored = history
    for key, head in _series(db).items():
        steps = sorted(stored[key])
        values = np.array([stored[key][s] for s in steps])
        assert head.points == len(steps)
        assert (head.first_step, head.last_step) == (steps[0], steps[-1])
        assert repr(head.last_value) == repr(float(values[-1]))
        assert head.nan == int(np.isnan(values).sum())
        assert (head.pos_inf, head.neg_inf) == (
            int((values == np.inf).sum()),
            int((values == -np.inf).sum()),
        )
        assert (head.first_time, head.last_time) == (1e9, 1e9 + STEPS - 1)


@pytest.mark.parametrize("merge", [False, True], ids=["chunks", "merged"])
def test_rollups_equal_a_full_scan(history: Any, merge: bool) -> None:
    db, stored = history
    compaction.compact(db, merge=False)
    if merge and db.is_duckdb:
        for kind in ("points", "rollups"):
            with db.read() as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        sa.text("SELECT id FROM chunks WHERE kind = :k"), {"k": kind}
                    )
                ]
            compaction.merge(db, kind, ids, 1)
    heads = _series(db)
    with db.read() as conn:
        for level in compaction.LEVELS[:3]:
            w = compaction.width(level)
            for key, head in heads.items():
                got = conn.execute(
                    sa.text(
                        "SELECT block, min(vmin), max(vmax), sum(vsum), sum(finite), sum(total), "
                        "sum(nan), sum(pos_inf), sum(neg_inf), max(last_step) FROM rollups "
                        "WHERE series_id = :sid AND level = :level GROUP BY block ORDER BY block"
                    ),
                    {"sid": head.id, "level": level},
                ).all()
                want = _reference_blocks(stored[key], w)
                assert [g[0] for g in got] == sorted(want)
                for g in got:
                    w_ = want[g[0]]
                    finite = [v for v in w_ if math.isfinite(v)]
                    assert g[5] == len(w_) and g[4] == len(finite)
                    assert (g[6], g[7], g[8]) == (
                        sum(map(math.isnan, w_)),
                        sum(v == math.inf for v in w_),
                        sum(v == -math.inf for v in w_),
                    )
                    if finite:
                        assert (g[1], g[2]) == (min(finite), max(finite))
                        assert g[3] == pytest.approx(math.fsum(finite), rel=1e-9)


def _reference_blocks(values: dict[int, float], width: int) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for step, value in values.items():
        out.setdefault(step // width, []).append(value)
    return out


def test_a_read_is_the_same_hot_compacted_and_merged(history: Any) -> None:
    db, _ = history
    query = Reads.over(db)
    views = [(0, None, 1000), (0, None, 50), (100, 400, 20), (5, 9, 100)]

    def snapshot() -> list[str]:
        return [
            repr(
                [
                    p._asdict()
                    for p in query.series.series(
                        EVERY, "h2", "k3_kl", step_min=lo, step_max=hi, max_points=n
                    ).points
                ]
            )
            for lo, hi, n in views
        ]

    before = snapshot()
    compaction.compact_all(db)
    assert snapshot() == before


def test_a_spike_survives_rollups_and_retention(migrated_db: Database) -> None:
    ingest = IngestService(migrated_db)
    steps = 20_000
    values = np.full(steps, 1e-3)
    values[13_337] = 7.5
    for start in range(0, steps, 5_000):
        records = [
            {"run_id": "spiky", "step": s, "source": "trainer", "metrics": {"k3_kl": values[s]}}
            for s in range(start, start + 5_000)
        ]
        ingest.ingest(ingest_batch({"run": {"id": "spiky"}, "records": records}), OPEN)
    ingest.close()
    query = Reads.over(migrated_db)
    compaction.compact_all(migrated_db)
    overview = query.series.series(EVERY, "spiky", "k3_kl", max_points=300)
    assert max(p.max or 0 for p in overview.points) == 7.5 and not overview.rollup_only

    dropped = retention.drop_raw(migrated_db, older_than_s=0.0, now=2e10)
    assert dropped.runs == ["spiky"] and dropped.values == steps
    assert query.runs.get_run(EVERY, "spiky").raw_dropped
    after = query.series.series(EVERY, "spiky", "k3_kl", max_points=300)
    assert repr(after.points) == repr(overview.points)  # overviews draw from rollups as before
    zoomed = query.series.series(
        EVERY, "spiky", "k3_kl", step_min=13_330, step_max=13_340, max_points=100
    )
    assert zoomed.rollup_only
    spike = [p for p in zoomed.points if p.max == 7.5]
    assert len(spike) == 1 and spike[0].step <= 13_337 <= spike[0].step_end
    # A re-sent old step is not stored again once its raw value is gone.
    again = IngestService(migrated_db)
    record = {"run_id": "spiky", "step": 5, "source": "trainer", "metrics": {"k3_kl": 1.0}}
    out = again.ingest(ingest_batch({"records": [record]}), OPEN)
    again.close()
    assert (out.accepted, out.duplicates) == (0, 1)
    assert retention.drop_raw(migrated_db, older_than_s=0.0, now=2e10).runs == []
