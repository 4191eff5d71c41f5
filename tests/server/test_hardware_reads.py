"""The per-GPU distribution of a metric against an independent NumPy computation: runs on one
GPU, an actor that moves between GPUs mid-run, actors with no GPU name, NaN/±Inf, values hot
and compacted, and a run whose raw values retention dropped (its 8-step block means stand in)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.writing import compaction, retention
from tests.factories import ingest_batch

H20, A100 = "NVIDIA H20", "NVIDIA A100-SXM4-80GB"

EVERY = ReadScope.EVERY


def _plan() -> list[tuple[str, str, int, str | None]]:
    """(run, actor, step, GPU) of every record: two one-GPU runs, one actor moving from H20 to
    A100 at step 300, one actor that never names its GPU."""
    out = []
    for step in range(600):
        out.append(("hw-h20", "t0", step, H20))
        out.append(("hw-a100", "t0", step, A100))
        out.append(("hw-moving", "t0", step, H20 if step < 300 else A100))
        out.append(("hw-moving", "t1", step, None))
    return out


def _value(rng: np.random.Generator) -> float:
    roll = rng.random()
    if roll < 0.01:
        return math.nan
    if roll < 0.015:
        return math.inf
    return float(rng.lognormal(-7, 1))


def _ingest(db: Database) -> dict[tuple[str, str, int], tuple[str, float]]:
    rng = np.random.default_rng(4)
    sent = {}
    ingest = IngestService(db)
    for run in ("hw-h20", "hw-a100", "hw-moving"):
        ingest.ingest(ingest_batch({"run": {"id": run, "project": "hw"}}), OPEN)
    plan = _plan()
    for n, half in enumerate((plan[: len(plan) // 2], plan[len(plan) // 2 :])):
        records = []
        for run, actor, step, gpu in half:
            value = _value(rng)
            # steps on no known GPU type are a box of their run's own, never pooled
            sent[(run, actor, step)] = (gpu or f"unknown GPU ({run})", value)
            records.append(
                {
                    "run_id": run,
                    "step": step,
                    "source": "trainer",
                    "actor": actor,
                    "gpu": gpu,
                    "metrics": {"k3_kl": value},
                }
            )
        ingest.ingest(ingest_batch({"records": records}), OPEN)
        if n == 0:
            compaction.compact(db)  # the first half compacted, the second still hot
    ingest.close()
    return sent


def _reference(values_by_gpu: dict[str, list[float]], runs: dict[str, set[Any]]) -> dict[str, Any]:
    out = {}
    for gpu, values in values_by_gpu.items():
        array = np.array(values)
        finite = array[np.isfinite(array)]
        out[gpu] = {
            "steps": len(finite),
            "nonfinite": len(array) - len(finite),
            "min": finite.min(),
            "max": finite.max(),
            "mean": finite.mean(),
            "quantiles": np.quantile(finite, [0.05, 0.25, 0.5, 0.75, 0.95]),
            "runs": len(runs[gpu]),
        }
    return out


def _check(found: list[Any], want: dict[str, Any]) -> None:
    assert [h.gpu for h in found] == sorted(want)
    for h in found:
        w = want[h.gpu]
        assert (h.steps, h.nonfinite, h.runs) == (w["steps"], w["nonfinite"], w["runs"]), h.gpu
        assert (h.min, h.max) == (pytest.approx(w["min"]), pytest.approx(w["max"]))
        assert h.mean == pytest.approx(w["mean"])
        got = [h.p05, h.q1, h.median, h.q3, h.p95]
        assert got == pytest.approx(list(w["quantiles"])), h.gpu
        assert h.quantiles_from == w["steps"]  # few values: the quantiles are of all of them


def test_per_gpu_distributions_equal_a_numpy_computation(migrated_db: Database) -> None:
    sent = _ingest(migrated_db)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    runs: dict[str, set[Any]] = defaultdict(set)
    for (run, _, _), (gpu, value) in sent.items():
        by_gpu[gpu].append(value)
        runs[gpu].add(run)
    query = Reads.over(migrated_db)
    _check(query.hardware.pooled(EVERY, project="hw", metric="k3_kl"), _reference(by_gpu, runs))
    moving = query.hardware.pooled(EVERY, run_ids=["hw-moving"], metric="k3_kl")
    assert {h.gpu: h.actors for h in moving} == {H20: 1, A100: 1, "unknown GPU (hw-moving)": 1}


def test_a_retained_run_counts_by_its_block_means(migrated_db: Database) -> None:
    sent = _ingest(migrated_db)
    with migrated_db.write() as conn:
        conn.exec_driver_sql("UPDATE runs SET last_seen = 0, created_at = 0 WHERE id = 'hw-a100'")
    # an hour: only the run dated to 1970 is old, however long the ingest above took
    assert retention.drop_raw(migrated_db, older_than_s=3600.0).runs == ["hw-a100"]
    blocks: dict[int, list[float]] = defaultdict(list)
    for (run, _, step), (_, value) in sent.items():
        if run == "hw-a100":
            blocks[step // 8].append(value)
    means = []
    for values in blocks.values():
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            means.append(sum(finite) / len(finite))
    found = {h.gpu: h for h in Reads.over(migrated_db).hardware.pooled(EVERY, run_ids=["hw-a100"])}
    assert list(found) == [A100] and found[A100].steps == len(means)
    assert found[A100].median == pytest.approx(float(np.median(means)))


def test_a_gpu_type_past_the_sample_size_gets_quantiles_of_windows_spread_over_its_runs(
    migrated_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the sample at 300 values, each GPU type's quantiles come from about 300 of its
    finite values, in windows over every run; each one's rank among all the type's values
    stays near its own (an independent NumPy ranking of everything sent)."""
    from server.services.reads import hardware_measure

    monkeypatch.setattr(hardware_measure, "QUANTILE_VALUES", 300)
    sent = _ingest(migrated_db)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    for (_, _, _), (gpu, value) in sent.items():
        if math.isfinite(value):
            by_gpu[gpu].append(value)
    found = Reads.over(migrated_db).hardware.pooled(EVERY, project="hw", metric="k3_kl")
    for h in found:
        everything = np.sort(by_gpu[h.gpu])
        assert h.steps == len(everything) > 300
        assert 150 <= h.quantiles_from <= 450, h.quantiles_from
        got_all = (h.p05, h.q1, h.median, h.q3, h.p95)
        for q, got in zip((0.05, 0.25, 0.5, 0.75, 0.95), got_all, strict=True):
            rank = np.searchsorted(everything, got) / len(everything)
            assert abs(rank - q) < 0.1, (h.gpu, q, rank)


@given(
    st.lists(
        st.tuples(st.integers(0, 5000), st.integers(1, 20000), st.integers(0, 20000)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 50_000),
    st.integers(1, 32),
)
def test_windows_keep_about_the_target_inside_each_piece(
    spec: list[tuple[int, int, int]], target: int, per_piece: int
) -> None:
    from server.storage.reading.hardware import Piece, windows

    chosen = []
    for sid, (first, span, finite) in enumerate(spec):
        last = first + span - 1
        piece = Piece(sid, sid, "g", -(2**62), 2**62, True, False, first, last)
        chosen.append((piece, min(finite, span)))
    kept = windows(chosen, target, per_piece)
    total = sum(n for _, n in chosen)
    if total <= target:
        assert kept == [p for p, _ in chosen]
        return
    assert [k.sid for k in kept] == [p.sid for p, _ in chosen]  # one piece per series still
    for (piece, n), sample in zip(chosen, kept, strict=True):
        if sample == piece:
            continue  # its share was all of it
        ranges = sample.windows()
        assert 1 <= len(ranges) <= per_piece and sample.keep < sample.every
        steps = 0
        for lo, hi in ranges:
            assert piece.first <= lo <= hi <= piece.last
            steps += hi - lo + 1
        # At the piece's density, the windows hold its share of the target: at least half of
        # it, at most one step more per window.
        share, density = target * n / total, n / (piece.last - piece.first + 1)
        assert 0.5 * min(share, n) <= steps * density <= share + (len(ranges) + 1) * density
