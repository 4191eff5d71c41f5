"""PostgreSQL's value store (migration 0010, `server/storage/writing/pg_points.py`): a database
written by the layout before migrates with its data intact and answers every read as one written
now; values are written once and never moved; rollups are one row per block, merged in place; a
compaction waits for the writers of the chunk it seals.

The database of the layout before is written with the SQL of revision 0009
(`tests/stored_values.py`), not through today's ingest and compaction."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads import Reads
from server.storage.db import Database
from server.storage.schema import migrate
from server.storage.writing import compaction, pg_points
from tests.conftest import fresh_pg_database
from tests.factories import ingest_batch
from tests.stored_values import StoredRun, store_at_0009
from tests.waiting import wait_for

pytestmark = pytest.mark.postgres

EVERY = ReadScope.EVERY
H20, L20 = "NVIDIA H20", "NVIDIA L20"
STEPS = 1500


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Database]:
    db = Database(fresh_pg_database(postgres_url))
    yield db
    db.dispose()


@pytest.fixture
def pg_now(postgres_url: str) -> Iterator[Database]:
    """A second database, written through today's ingest: what a migrated one must read like."""
    db = Database(fresh_pg_database(postgres_url))
    yield db
    db.dispose()


def _values(seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).lognormal(-7, 1, STEPS)
    values[[5, 700]] = np.nan
    values[6] = np.inf
    values[1200] = -np.inf
    values[901] = 3.0  # a one-step spike
    return values


RUNS: dict[str, tuple[tuple[tuple[int, str], ...], int]] = {
    # run: ((first step, GPU) of each hardware segment, seed of its k3_kl values)
    "on-h20": (((0, H20),), 1),
    "on-l20": (((0, L20),), 2),
    "moved": (((0, H20), (600, L20)), 3),  # resumed on other hardware
}
BATCHES = ((0, 500), (500, 1003), (1003, STEPS))
"""Steps written between compactions: two rounds split blocks across chunks, the last batch
stays hot."""


def _gpu(run: str, step: int) -> str:
    return [gpu for first, gpu in RUNS[run][0] if first <= step][-1]


def _stored(run: str) -> StoredRun:
    segments, seed = RUNS[run]
    return StoredRun(segments, {"grad_norm": np.arange(STEPS, dtype=float), "k3_kl": _values(seed)})


def _write(ingest: IngestService, run: str, gpu: Any, values: np.ndarray, lo: int, hi: int) -> None:
    records = [
        {
            "run_id": run,
            "step": s,
            "source": "trainer",
            "actor": "t0",
            "time": 1e9 + s,
            "gpu": gpu(s),
            "metrics": {"k3_kl": float(values[s]), "grad_norm": float(s)},
        }
        for s in range(lo, hi)
    ]
    ingest.ingest(ingest_batch({"records": records}), OPEN)


def _fill(db: Database) -> None:
    """The three runs written through today's ingest in `BATCHES`, compacted after each but
    the last."""
    ingest = IngestService(db)
    try:
        for run in RUNS:
            body = {"run": {"id": run, "project": "p", "config": {"lr": 1e-6}}}
            ingest.ingest(ingest_batch(body), OPEN)
        for lo, hi in BATCHES:
            for run, (_, seed) in RUNS.items():
                _write(ingest, run, lambda s, run=run: _gpu(run, s), _values(seed), lo, hi)
            if hi < STEPS:
                compaction.compact(db)
    finally:
        ingest.close()


def _answers(db: Database) -> dict[str, Any]:
    """What the views read: a run's series at three resolutions, an overlay, the hardware
    distribution and comparison (as plain values)."""
    reads = Reads.over(db)
    out: dict[str, Any] = {}
    for n, lo, hi in ((1000, None, None), (40, None, None), (200, 880, 1220)):
        found = reads.series.series(EVERY, "moved", "k3_kl", step_min=lo, step_max=hi, max_points=n)
        out[f"series-{n}"] = _plain(found.points)
    grid = reads.series.series_grid(EVERY, list(RUNS), ["k3_kl"], max_points=100)
    out["overlay"] = _plain([s.points for s in grid])
    out["pooled"] = _plain(reads.hardware.pooled(EVERY, project="p", metric="k3_kl"))
    compared = reads.hardware.comparison(EVERY, project="p", metric="k3_kl", n_boot=200)
    out["figures"] = _plain([g.gpus for g in compared.groups])
    return out


def _plain(found: Any) -> Any:
    if dataclasses.is_dataclass(found) and not isinstance(found, type):
        return [_plain(v) for v in dataclasses.astuple(found)]
    if isinstance(found, list | tuple):
        return [_plain(v) for v in found]
    return found


def _differ(got: Any, want: Any, at: str = "") -> str:
    """Where two answers differ ("" where they do not), floats compared up to the order of
    additions (a mean is a sum over rollup rows, which the migration merged)."""
    if isinstance(want, float) and isinstance(got, float):
        same = math.isclose(got, want, rel_tol=1e-12) or (math.isnan(got) and math.isnan(want))
        return "" if same else f"{at}: {got!r} != {want!r}"
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        return next((d for k in want if (d := _differ(got[k], want[k], f"{at}/{k}"))), "")
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        pairs = enumerate(zip(got, want, strict=True))
        return next((d for i, (g, w) in pairs if (d := _differ(g, w, f"{at}[{i}]"))), "")
    return "" if got == want else f"{at}: {got!r} != {want!r}"


def _rollup_sums(db: Database) -> dict[tuple[int, int, int], tuple[Any, ...]]:
    with db.read() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT series_id, level, block, min(step_lo), max(step_hi), min(vmin), max(vmax), "
                "sum(vsum), sum(finite), sum(total), max(last_step), sum(nan), sum(pos_inf), "
                "sum(neg_inf) FROM rollups GROUP BY series_id, level, block"
            )
        ).all()
    return {
        (r[0], r[1], r[2]): tuple(round(v, 12) if isinstance(v, float) else v for v in r[3:])
        for r in rows
    }


def test_a_database_written_before_0010_migrates_intact_and_reads_the_same(
    pg: Database, pg_now: Database
) -> None:
    migrate.upgrade(pg, "0009")
    store_at_0009(pg, {run: _stored(run) for run in RUNS}, BATCHES)
    with pg.read() as conn:
        count = "SELECT count(*) FROM {}"
        compacted, hot = (
            conn.execute(sa.text(count.format(t))).scalar_one() for t in ("points", "points_hot")
        )
        stored = conn.execute(
            sa.text(
                "SELECT series_id, step, value FROM points UNION ALL "
                "SELECT series_id, step, value FROM points_hot ORDER BY 1, 2"
            )
        ).all()
        partial_rows = conn.execute(sa.text(count.format("rollups"))).scalar_one()
    assert hot > 0 and compacted > 0
    sums = _rollup_sums(pg)
    assert partial_rows > len(sums)  # blocks split across the two chunks
    migrate.upgrade(pg_now)
    _fill(pg_now)
    now = _answers(pg_now)

    migrate.upgrade(pg)

    with pg.read() as conn:
        assert conn.execute(sa.text(count.format("points"))).scalar_one() == compacted
        assert conn.execute(sa.text(count.format("points_hot"))).scalar_one() == hot
        kept = conn.execute(
            sa.text("SELECT series_id, step, value FROM point_values ORDER BY 1, 2")
        ).all()
        rows = conn.execute(sa.text(count.format("rollups"))).scalar_one()
    assert repr(kept) == repr(stored)
    assert rows == len(sums) and _rollup_sums(pg) == sums  # one row per block, merged exactly
    assert not _differ(_answers(pg), now)
    compaction.compact_all(pg)
    assert not _differ(_answers(pg), now)


def test_values_are_written_once_and_rollups_merged_in_place(pg: Database) -> None:
    """Compaction moves no value (each keeps its place in the table) and leaves one rollup row
    per block, equal to one computed from all its values at once."""
    migrate.upgrade(pg)
    _fill(pg)
    place = "SELECT series_id, step, ctid::text FROM point_values ORDER BY 1, 2"
    with pg.read() as conn:
        before = conn.execute(sa.text(place)).all()
    compaction.compact(pg)
    with pg.read() as conn:
        assert conn.execute(sa.text(place)).all() == before
        assert conn.execute(sa.text("SELECT count(*) FROM points_hot")).scalar_one() == 0
        duplicates = conn.execute(
            sa.text("SELECT count(*) - count(DISTINCT (series_id, level, block)) FROM rollups")
        ).scalar_one()
        got = conn.execute(
            sa.text(
                "SELECT r.series_id, r.block, r.vmin, r.vmax, r.vsum, r.finite, r.total, "
                "r.last_value, r.nan, r.pos_inf, r.neg_inf FROM rollups r WHERE level = 1 "
                "ORDER BY 1, 2"
            )
        ).all()
        values = conn.execute(
            sa.text("SELECT series_id, step, value FROM point_values ORDER BY 1, 2")
        ).all()
    assert duplicates == 0
    blocks: dict[tuple[int, int], list[float]] = {}
    for sid, step, value in values:
        blocks.setdefault((sid, step // 8), []).append(value)
    assert [(g[0], g[1]) for g in got] == sorted(blocks)
    for g in got:
        want = np.array(blocks[(g[0], g[1])])
        finite = want[np.isfinite(want)]
        assert (g.finite, g.total) == (finite.size, want.size)
        assert (g.nan, g.pos_inf, g.neg_inf) == (
            int(np.isnan(want).sum()),
            int((want == np.inf).sum()),
            int((want == -np.inf).sum()),
        )
        assert repr(g.last_value) == repr(float(want[-1]))
        if finite.size:
            assert (g.vmin, g.vmax) == (finite.min(), finite.max())
            assert g.vsum == pytest.approx(math.fsum(finite), rel=1e-12)


def test_a_compaction_waits_for_a_writer_of_the_chunk_it_seals(pg: Database) -> None:
    migrate.upgrade(pg)
    ingest = IngestService(pg)
    ingest.ingest(ingest_batch({"run": {"id": "w", "project": "p"}}), OPEN)
    _write(ingest, "w", lambda s: H20, _values(1), 0, 10)
    ingest.close()
    with pg.read() as conn:
        sid = conn.execute(sa.text("SELECT id FROM series WHERE metric = 'k3_kl'")).scalar_one()
        opened = conn.execute(sa.text("SELECT last_value FROM chunk_id_seq")).scalar_one()
    done = threading.Event()
    with pg.write() as conn:
        pg_points.write(conn, pg, [sid], [10], [0.5], [1e9])  # reads the open chunk
        worker = threading.Thread(target=lambda: (compaction.compact(pg), done.set()))
        worker.start()

        def sealed() -> bool:
            with pg.read() as look:
                return bool(
                    look.execute(sa.text("SELECT last_value FROM chunk_id_seq")).scalar_one()
                    > opened
                )

        wait_for(sealed, message="the compaction did not seal the open chunk")
        assert not done.is_set()  # still waiting for this transaction, which holds its chunk
    worker.join(60)
    assert done.is_set()
    with pg.read() as conn:
        total = conn.execute(
            sa.text("SELECT sum(total) FROM rollups WHERE series_id = :sid AND level = 6"),
            {"sid": sid},
        ).scalar_one()
        hot = conn.execute(sa.text("SELECT count(*) FROM points_hot")).scalar_one()
    assert (total, hot) == (11, 0)
