"""A database written before the history layout migrates forward and answers every read as
before: its values, heads, GPU segments and bucket sums come from what was stored."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa

from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.schema import migrate
from server.storage.writing import compaction
from tests.conftest import ROOT
from tests.server.test_series import reference_buckets

STEPS = 3000

EVERY = ReadScope.EVERY


@pytest.fixture
def old_db(db_url: str) -> Iterator[tuple[Database, np.ndarray]]:
    """Revision 0002 (the layout before), filled the way its ingest filled it."""
    db = Database(db_url)
    migrate.upgrade(db, "0002")
    rng = np.random.default_rng(3)
    values = rng.lognormal(-7, 1, STEPS)
    values[[10, 2000]] = np.nan
    values[11] = np.inf
    values[1999] = 42.0
    with db.write() as conn:
        x = sa.text
        conn.execute(x("INSERT INTO projects VALUES ('old', 1.0)"))
        conn.execute(
            x(
                "INSERT INTO runs (pk, id, project, name, created_at, last_seen, last_step) "
                "VALUES (nextval('runs_pk_seq'), 'legacy', 'old', 'legacy run', 1.0, 2.0, :last)"
            ),
            {"last": STEPS - 1},
        )
        conn.execute(
            x(
                "INSERT INTO series (id, run_pk, source, actor, metric) VALUES "
                "(nextval('series_id_seq'), 1, 'trainer', 't0', 'k3_kl')"
            )
        )
        records = [
            {"step": s, "time": 1e9 + s, "gpu": "NVIDIA L20" if s < 1500 else "NVIDIA H20"}
            for s in range(STEPS)
        ]
        conn.execute(
            x(
                "INSERT INTO step_records (run_pk, source, actor, step, time, gpu) "
                "VALUES (1, 'trainer', 't0', :step, :time, :gpu)"
            ),
            records,
        )
        conn.execute(
            x("INSERT INTO points (series_id, step, value) VALUES (1, :s, :v)"),
            [{"s": s, "v": float(v)} for s, v in enumerate(values)],
        )
        conn.execute(
            x(
                "INSERT INTO bucket_rows VALUES (1, 'trainer', 't0', :s, 'rollout', 0, 0.0, 0.5, "
                "2.0, 0.1, 0.2, 0.01, 0.011, 1.0)"
            ),
            [{"s": s} for s in range(0, STEPS, 3)],
        )
    yield db, values
    db.dispose()


def test_an_old_database_migrates_and_reads_as_before(
    old_db: tuple[Database, np.ndarray],
) -> None:
    db, values = old_db
    migrate.upgrade(db)
    assert compaction.compact_all(db) == STEPS
    query = Reads.over(db)
    full = query.series.series(EVERY, "legacy", "k3_kl", max_points=STEPS)
    assert [p.step for p in full.points] == list(range(STEPS))
    assert repr([p.last for p in full.points]) == repr([float(v) for v in values])
    assert [p.time for p in full.points] == [1e9 + s for s in range(STEPS)]
    for lo, hi, n in ((0, STEPS - 1, 100), (7, 2500, 33)):
        got = query.series.series(
            EVERY, "legacy", "k3_kl", step_min=lo, step_max=hi, max_points=n
        ).points
        want = reference_buckets(values, lo, hi, n)
        assert [(g.step, g.step_end, g.nan, g.pos_inf) for g in got] == [
            (w["step"], w["step_end"], w["nan"], w["pinf"]) for w in want
        ]
        assert max(g.max or 0 for g in got) == 42.0
    run = query.runs.get_run(EVERY, "legacy")
    assert run.gpus == ("NVIDIA H20", "NVIDIA L20")
    assert run.latest["k3_kl"] == pytest.approx(values[-1])
    assert [(a.gpu, a.first_step, a.last_step, a.steps) for a in run.actors] == [
        ("NVIDIA H20", 0, STEPS - 1, STEPS)
    ]
    with db.read() as conn:
        segments = conn.execute(
            sa.text("SELECT seq, gpu, first_step, last_step, steps FROM actors ORDER BY seq")
        ).all()
        head = conn.execute(sa.text("SELECT * FROM series")).one()
    assert [tuple(s) for s in segments] == [
        (0, "NVIDIA L20", 0, 1499, 1500),
        (1, "NVIDIA H20", 1500, STEPS - 1, 1500),
    ]
    assert (head.points, head.first_step, head.last_step, head.nan, head.pos_inf) == (
        STEPS,
        0,
        STEPS - 1,
        2,
        1,
    )
    (bucket,) = query.series.buckets(EVERY, ["legacy"])
    assert (bucket.tokens, bucket.steps) == (2.0 * 1000, 1000)
    by_gpu = {b.group: b.tokens for b in query.series.buckets(EVERY, ["legacy"], group_by="gpu")}
    assert by_gpu == {"NVIDIA L20": 2.0 * 500, "NVIDIA H20": 2.0 * 500}
    assert not math.isnan(query.hardware.pooled(EVERY, project="old")[0].median or math.nan)


def test_the_migrate_command_sorts_old_values_with_a_progress_bar(
    old_db: tuple[Database, np.ndarray], db_url: str
) -> None:
    db, values = old_db
    db.dispose()  # the command opens the database itself (DuckDB: one process at a time)
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "migrate", "--db", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.head_revision()}" in done.stdout
    assert "compacting stored values" in done.stdout
    assert f"compacted {STEPS:,} values" in done.stdout
    with db.read() as conn:
        hot = conn.execute(sa.text("SELECT count(*) FROM points_hot")).scalar_one()
        rollups = conn.execute(sa.text("SELECT count(*) FROM rollups WHERE level = 1")).scalar_one()
    assert (hot, rollups) == (0, STEPS // 8)
    last = Reads.over(db).series.series(EVERY, "legacy", "k3_kl", step_min=STEPS - 1).points
    assert repr(last[0].last) == repr(float(values[-1]))
