"""Server-side downsampling against an independent NumPy computation; spikes are never lost."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.errors import NotFound, Rejected
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.reading import series
from server.storage.schema import migrate
from server.storage.writing import compaction, retention
from tests.factories import ingest_batch

EVERY = ReadScope.EVERY


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    migrate.upgrade(db)
    yield db
    db.dispose()


@pytest.fixture
def services(database: Database) -> Iterator[tuple[IngestService, Reads]]:
    ingest = IngestService(database)
    yield ingest, Reads.over(database)
    ingest.close()


def _load(
    ingest: IngestService, run_id: str, values: np.ndarray, chunk: int = 20_000, start: int = 0
) -> None:
    for first in range(start, len(values), chunk):
        records = [
            {
                "run_id": run_id,
                "step": int(s),
                "source": "trainer",
                "actor": "t0",
                "metrics": {"k3_kl": float(values[s])},
            }
            for s in range(first, min(first + chunk, len(values)))
        ]
        ingest.ingest(ingest_batch({"run": {"id": run_id}, "records": records}), OPEN)


def reference_plan(lo: int, hi: int, max_points: int) -> tuple[int, int, int]:
    """The documented bucketing: W = ceil(span / max_points) steps, rounded up to a multiple of
    the widest rollup block (8**L, L = 1..6) not wider than W; buckets aligned to multiples of
    that width from step 0 (a block wider while the range would straddle more than max_points
    of them); a read through rollups keeps whole blocks at the range's edges."""
    needed = max(1, math.ceil((hi - lo + 1) / max_points))
    block = max([8**level for level in range(1, 7) if 8**level <= needed], default=1)
    width = math.ceil(needed / block) * block
    while hi // width - lo // width + 1 > max_points:
        width += block
    if block > 1:
        lo, hi = lo // block * block, (hi // block + 1) * block - 1
    return lo, hi, width


def reference_buckets(
    values: np.ndarray, lo: int, hi: int, max_points: int
) -> list[dict[str, float]]:
    """Step buckets computed step by step, independently of the SQL."""
    lo, hi, width = reference_plan(lo, hi, max_points)
    out: dict[int, dict[str, float]] = {}
    for step in range(max(lo, 0), min(hi, len(values) - 1) + 1):
        b = step // width
        v = float(values[step])
        cell = out.setdefault(
            b, {"step": step, "finite": [], "last": v, "nan": 0, "pinf": 0, "ninf": 0}
        )
        cell["last"] = v
        cell["step_end"] = step
        if math.isnan(v):
            cell["nan"] += 1
        elif v == math.inf:
            cell["pinf"] += 1
        elif v == -math.inf:
            cell["ninf"] += 1
        else:
            cell["finite"].append(v)
    return [out[k] for k in sorted(out)]


def test_100k_steps_keep_a_one_step_spike(services: tuple[IngestService, Reads]) -> None:
    ingest, query = services
    rng = np.random.default_rng(0)
    values = 1e-3 + 1e-4 * rng.standard_normal(100_000)
    values[73_421] = 5.0
    _load(ingest, "long", values)
    series = query.series.series(EVERY, "long", "k3_kl", max_points=1000)
    assert series.total_points == 100_000 and series.downsampled
    assert 500 < len(series.points) <= 1000  # buckets of whole rollup blocks: W <= W' < 2W
    maxima = [p.max for p in series.points]
    spike_bucket = int(np.argmax(maxima))
    assert maxima[spike_bucket] == pytest.approx(5.0)
    assert series.points[spike_bucket].step <= 73_421 <= series.points[spike_bucket].step_end
    assert sorted(maxima)[-2] < 0.01


@pytest.mark.parametrize("compacted", [False, True], ids=["hot", "compacted"])
def test_buckets_match_reference_with_nonfinite_values(
    services: tuple[IngestService, Reads], database: Database, compacted: bool
) -> None:
    ingest, query = services
    rng = np.random.default_rng(1)
    values = rng.standard_normal(997)
    values[[5, 400]] = np.nan
    values[17] = np.inf
    values[18] = -np.inf
    values[300:376] = np.nan  # a collapse: whole rollup blocks without a finite value...
    values[376:390] += 50.0  # ...sharing buckets with blocks that have some
    _load(ingest, "ref", values[:600])
    if compacted:  # some of the run in sorted chunks and rollups, the rest still hot
        compaction.compact(database)
    _load(ingest, "ref", values, start=600)
    cases = (
        (0, 996, 100),
        (10, 500, 37),
        (0, 996, 5000),
        (990, 996, 1),
        (3, 990, 7),
        (1, 200, 100),
    )
    for lo, hi, max_points in cases:
        got = query.series.series(
            EVERY, "ref", "k3_kl", step_min=lo, step_max=hi, max_points=max_points
        ).points
        want = reference_buckets(values, lo, hi, max_points)
        assert len(got) == len(want) <= max_points
        for g, w in zip(got, want, strict=True):
            assert (g.step, g.step_end) == (w["step"], w["step_end"])
            assert (g.nan, g.pos_inf, g.neg_inf) == (w["nan"], w["pinf"], w["ninf"])
            assert g.count == w["step_end"] - w["step"] + 1
            if w["finite"]:
                assert g.min == pytest.approx(min(w["finite"]))
                assert g.max == pytest.approx(max(w["finite"]))
                assert g.mean == pytest.approx(sum(w["finite"]) / len(w["finite"]))
            else:
                assert g.min is None and g.max is None and g.mean is None
            if math.isnan(w["last"]):
                assert math.isnan(g.last)
            else:
                assert g.last == w["last"]


def test_series_of_several_actors_merges_per_step(
    services: tuple[IngestService, Reads],
) -> None:
    ingest, query = services
    records = [
        {
            "run_id": "multi",
            "step": s,
            "source": "rollout",
            "actor": f"a{a}",
            "metrics": {"x": float(a * 10 + s)},
        }
        for s in range(10)
        for a in range(3)
    ]
    ingest.ingest(ingest_batch({"run": {"id": "multi"}, "records": records}), OPEN)
    merged = query.series.series(EVERY, "multi", "x", max_points=10)
    assert merged.source == "rollout"
    assert [(p.min, p.max, p.count) for p in merged.points][:2] == [(0.0, 20.0, 3), (1.0, 21.0, 3)]
    one = query.series.series(EVERY, "multi", "x", actor="a2", max_points=10)
    assert [p.last for p in one.points] == [20.0 + s for s in range(10)]


def test_a_block_without_finite_values_lends_its_bucket_nothing(
    services: tuple[IngestService, Reads], database: Database
) -> None:
    ingest, query = services
    values = np.full(600, 2.0)
    values[300:376] = np.nan  # blocks 38-46 of 8 steps hold no finite value
    _load(ingest, "gap", values)
    compaction.compact(database)
    found = query.series.series(
        EVERY, "gap", "k3_kl", max_points=60
    )  # buckets of 16 steps from 8-step rollups
    by_step = {p.step: p for p in found.points}
    assert (by_step[304].min, by_step[304].max, by_step[304].nan) == (None, None, 16)
    assert (by_step[368].min, by_step[368].max, by_step[368].nan) == (2.0, 2.0, 8)


def test_step_range_outside_data_is_empty(services: tuple[IngestService, Reads]) -> None:
    ingest, query = services
    _load(ingest, "short", np.arange(10, dtype=float))
    assert query.series.series(EVERY, "short", "k3_kl", step_min=50).points == ()
    assert query.series.series(EVERY, "short", "missing_metric").total_points == 0


def test_a_grid_read_equals_its_series_read_one_by_one(
    services: tuple[IngestService, Reads], database: Database
) -> None:
    """Runs of different lengths (different rollup levels), partly hot, with several metrics
    and a metric one run lacks: the batched read answers exactly what single reads answer."""
    ingest, query = services
    rng = np.random.default_rng(11)
    lengths = {"g-long": 60_000, "g-mid": 7_000, "g-short": 900}
    for run_id, steps in lengths.items():
        values = rng.lognormal(-7, 1, steps)
        values[steps // 3] = np.nan
        _load(ingest, run_id, values)
    extra = [
        {"run_id": "g-mid", "step": s, "source": "rollout", "actor": "r0", "metrics": {"ent": 0.5}}
        for s in range(100)
    ]
    ingest.ingest(ingest_batch({"records": extra}), OPEN)
    compaction.compact(database)
    tail = [
        {
            "run_id": "g-long",
            "step": 60_000 + s,
            "source": "trainer",
            "actor": "t0",
            "metrics": {"k3_kl": 1.0},
        }
        for s in range(50)
    ]  # stays hot
    ingest.ingest(ingest_batch({"records": tail}), OPEN)

    runs, metrics = list(lengths), ["k3_kl", "ent"]
    for window in ({}, {"step_min": 500, "step_max": 3_000}, {"step_min": 59_990}):
        grid = query.series.series_grid(EVERY, runs, metrics, max_points=300, **window)
        assert [(s.run_id, s.metric) for s in grid] == [(r, m) for r in runs for m in metrics]
        for got in grid:
            one = query.series.series(EVERY, got.run_id, got.metric, max_points=300, **window)
            assert repr(got) == repr(one), (got.run_id, got.metric)
    assert [s.total_points for s in grid if s.metric == "ent"] == [0, 0, 0]  # none past 59,990
    page = query.series.run_series(EVERY, "g-mid", ["k3_kl", "ent", "absent"], max_points=50)
    assert sorted(page) == ["ent", "k3_kl"] and page["ent"].source == "rollout"


def test_a_grid_read_refuses_what_it_cannot_answer(
    services: tuple[IngestService, Reads],
) -> None:
    ingest, query = services
    _load(ingest, "g1", np.ones(10))
    with pytest.raises(NotFound, match="no run 'nope'"):
        query.series.series_grid(EVERY, ["g1", "nope"], ["k3_kl"])
    with pytest.raises(NotFound):
        query.series.series_grid(ReadScope.of(["elsewhere"]), ["g1"], ["k3_kl"])
    with pytest.raises(Rejected, match="at most"):
        query.series.series_grid(EVERY, ["g1"] * 201, ["k3_kl"])


def test_reads_of_one_series_in_different_windows_stay_apart(
    services: tuple[IngestService, Reads], database: Database
) -> None:
    ingest, _ = services
    _load(ingest, "w", np.random.default_rng(5).lognormal(-7, 1, 20_000))
    compaction.compact(database)
    windows = [(0, 99, 100), (5_000, 6_000, 100), (0, 19_999, 100), (100, 1_000, 20)]
    with database.read() as conn:
        pk = conn.execute(sa.text("SELECT pk FROM runs WHERE id = 'w'")).scalar_one()
        source, heads = series.find(conn, pk, "k3_kl", None, None)
        wanted = [series.Wanted(pk, source, heads, lo, hi, n) for lo, hi, n in windows]
        together = series.read(conn, wanted)
        alone = [series.read(conn, [w])[0] for w in wanted]
    assert together == alone
    assert [r.blocks[0][0] for r in together] == [0, 5_000, 0, 96]  # each its own first bucket


def test_a_live_view_extends_the_buckets_it_holds(
    services: tuple[IngestService, Reads], database: Database
) -> None:
    ingest, query = services
    values = np.random.default_rng(2).lognormal(-7, 1, 10_000)
    _load(ingest, "live", values[:9_000])
    compaction.compact(database)
    _load(ingest, "live", values, start=9_000)  # the last steps still hot
    view = query.series.series(EVERY, "live", "k3_kl", max_points=1000)
    width = view.bucket_steps
    assert width == 16
    start = view.points[-5].step // width * width
    tail = query.series.series(EVERY, "live", "k3_kl", step_min=start, bucket_steps=width)
    assert tail.points == view.points[-5:]
    odd = query.series.series(EVERY, "live", "k3_kl", step_min=101, step_max=180, bucket_steps=20)
    assert [p.step for p in odd.points] == [101, 120, 140, 160, 180]
    assert odd.points[0].mean == pytest.approx(values[101:120].mean())
    with pytest.raises(Rejected, match="narrow the range or widen the buckets"):
        query.series.series(EVERY, "live", "k3_kl", bucket_steps=2, max_points=100)


def test_trends_are_each_runs_series_in_a_few_buckets(
    services: tuple[IngestService, Reads], database: Database
) -> None:
    ingest, query = services
    rng = np.random.default_rng(8)
    for run_id, steps in (("t-long", 5_000), ("t-short", 40), ("t-gone", 3_000)):
        values = rng.lognormal(-7, 1, steps)
        values[steps // 2] = np.nan
        _load(ingest, run_id, values)
    compaction.compact(database)
    _load(ingest, "t-long", np.ones(5_100), start=5_000)  # hot
    with database.write() as conn:
        conn.exec_driver_sql("UPDATE runs SET last_seen = 0, created_at = 0 WHERE id = 't-gone'")
    retention.drop_raw(database, older_than_s=3600.0)  # only the run dated to 1970, however slow
    found = query.runs.trends(
        EVERY, ["t-long", "t-short", "t-gone", "t-none"], metric="k3_kl", points=30
    )
    assert sorted(found) == ["t-gone", "t-long", "t-short"]
    for run_id, trend in found.items():
        want = [
            math.nan if p.mean is None else p.mean
            for p in query.series.series(EVERY, run_id, "k3_kl", max_points=30).points
        ]
        assert 2 <= len(trend) <= 30
        np.testing.assert_allclose(trend, want)


def test_a_bucket_of_values_near_the_float_limit_has_a_finite_mean() -> None:
    from server.storage.downsampling import Parts, buckets

    big = 1.5e308
    [row] = buckets(Parts.from_values(range(4), [big] * 4), 4)
    assert row[4] == pytest.approx(big)  # the mean: a plain sum of the four would be inf
