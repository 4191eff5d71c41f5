"""The like-for-like hardware comparison through the read side, on runs stored in a real DuckDB
file whose answer is known by construction: log k3 = log(GPU median) + run offset + AR(1) noise,
so the true ratio of GPU medians is set, not measured."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.writing import compaction
from tests.factories import ingest_batch

A100, H20, L20 = "NVIDIA A100-SXM4-80GB", "NVIDIA H20", "NVIDIA L20"
PARITY = {"engine": {"version": "0.18.1", "logprobs_mode": "processed_logprobs"}}
RAW = {"engine": {"version": "0.18.1", "logprobs_mode": "raw_logprobs"}}

EVERY = ReadScope.EVERY


def _k3(rng: np.random.Generator, median: float, steps: int, phi: float = 0.8) -> np.ndarray:
    noise = np.empty(steps)
    noise[0] = rng.standard_normal()
    for t in range(1, steps):
        noise[t] = phi * noise[t - 1] + np.sqrt(1 - phi**2) * rng.standard_normal()
    return np.exp(np.log(median) + 0.2 * rng.standard_normal() + 0.4 * noise)


def _post(
    ingest: IngestService,
    run_id: str,
    gpus: list[tuple[int, str]],
    values: np.ndarray,
    *,
    config: dict[str, Any],
    labels: dict[str, str] | None = None,
    project: str = "hw",
) -> None:
    """One run; `gpus` are (first step, GPU) switches, e.g. a resume on other hardware."""

    def gpu_at(step: int) -> str:
        return [g for first, g in gpus if first <= step][-1]

    records = [
        {
            "run_id": run_id,
            "step": step,
            "source": "trainer",
            "actor": "trainer-0",
            "gpu": gpu_at(step),
            "metrics": {"k3_kl": float(v)},
        }
        for step, v in enumerate(values)
    ]
    run = {"id": run_id, "name": f"run {run_id}", "project": project, "config": config}
    run["labels"] = labels or {}
    ingest.ingest(ingest_batch({"run": run, "records": records}), OPEN)


def _seed(db: Database, ratio: float, *, per_gpu: int = 5, steps: int = 150) -> None:
    rng = np.random.default_rng(11)
    ingest = IngestService(db)
    for i in range(per_gpu):
        _post(ingest, f"a{i}", [(0, A100)], _k3(rng, 1e-3 * ratio, steps), config=PARITY)
        _post(ingest, f"h{i}", [(0, H20)], _k3(rng, 1e-3, steps), config=PARITY)
    _post(ingest, "raw", [(0, H20)], _k3(rng, 1e-1, steps), config=RAW)
    ingest.close()
    compaction.compact(db)


def _pair(found: Any) -> Any:
    (group,) = found.groups
    (pair,) = group.pairs
    return group, pair


def test_tenfold_gpu_difference_is_inside_the_interval_and_one_is_outside(
    migrated_db: Database,
) -> None:
    _seed(migrated_db, 10.0)
    found = Reads.over(migrated_db).hardware.comparison(EVERY, project="hw")
    group, pair = _pair(found)
    assert (pair.a, pair.b) == (A100, H20)
    assert pair.ci_low <= 10.0 <= pair.ci_high
    assert pair.ci_low > 1.0
    assert (pair.runs_a, pair.runs_b, pair.steps_a, pair.steps_b) == (5, 5, 750, 750)
    assert pair.sentence.startswith(f"{A100}'s median k3_kl is ")
    assert "5 vs 5 runs" in pair.sentence
    medians = {g.gpu: g.median for g in group.gpus}
    assert pair.ratio == pytest.approx(medians[A100] / medians[H20])


def test_equal_gpus_give_an_interval_that_contains_one(migrated_db: Database) -> None:
    _seed(migrated_db, 1.0)
    _, pair = _pair(Reads.over(migrated_db).hardware.comparison(EVERY, project="hw"))
    assert pair.ci_low <= 1.0 <= pair.ci_high


def test_a_run_with_another_parity_setting_is_excluded_and_named(migrated_db: Database) -> None:
    _seed(migrated_db, 10.0)
    found = Reads.over(migrated_db).hardware.comparison(EVERY, project="hw")
    group, _ = _pair(found)
    assert "raw" not in group.run_ids and len(group.run_ids) == 10
    assert [(e.run_id, e.name, e.setting, e.value, e.group_value) for e in found.excluded] == [
        ("raw", "run raw", "logprobs_mode", "raw_logprobs", "processed_logprobs")
    ]
    # The pooled rows still cover every selected run: the raw-logprobs run is in H20's.
    pooled = {h.gpu: h.runs for h in found.pooled}
    assert pooled == {A100: 5, H20: 6}


def test_a_resumed_run_counts_each_segment_under_its_own_gpu(migrated_db: Database) -> None:
    rng = np.random.default_rng(5)
    ingest = IngestService(migrated_db)
    _post(ingest, "l20", [(0, L20)], _k3(rng, 1e-2, 100), config=PARITY)
    _post(ingest, "resumed", [(0, L20), (60, H20)], _k3(rng, 1e-2, 120), config=PARITY)
    ingest.close()
    query = Reads.over(migrated_db)
    found = query.hardware.comparison(EVERY, project="hw")
    (group,) = found.groups
    by_gpu = {g.gpu: (g.runs, g.segments, g.steps) for g in group.gpus}
    assert by_gpu == {H20: (1, 1, 60), L20: (2, 2, 160)}
    segments = query.runs.get_run(EVERY, "resumed").gpu_segments
    assert [(s.gpu, s.first_step, s.last_step) for s in segments] == [
        (L20, 0, 59),
        (H20, 60, 119),
    ]


def test_grouping_by_a_label_compares_within_its_value(migrated_db: Database) -> None:
    rng = np.random.default_rng(8)
    ingest = IngestService(migrated_db)
    for run_id, gpu, recipe in (("x", A100, "dapo"), ("y", H20, "dapo"), ("z", H20, "grpo")):
        _post(
            ingest, run_id, [(0, gpu)], _k3(rng, 1e-3, 40), config=PARITY, labels={"recipe": recipe}
        )
    ingest.close()
    found = Reads.over(migrated_db).hardware.comparison(
        EVERY, project="hw", group_by="label:recipe"
    )
    assert found.groups[0].run_ids == ("x", "y")
    assert [(e.run_id, e.setting, e.value) for e in found.excluded] == [("z", "recipe", "grpo")]
    narrowed = Reads.over(migrated_db).hardware.comparison(EVERY, project="hw", label="recipe=grpo")
    assert narrowed.groups == () and [h.gpu for h in narrowed.pooled] == [H20]
    assert "spans two GPU types" in narrowed.note


def test_runs_of_two_projects_sharing_an_id_stay_two_runs(migrated_db: Database) -> None:
    rng = np.random.default_rng(9)
    ingest = IngestService(migrated_db)
    for project, gpu in (("p1", A100), ("p2", H20)):
        _post(ingest, "r", [(0, gpu)], _k3(rng, 1e-3, 30), config=PARITY, project=project)
    ingest.close()
    found = Reads.over(migrated_db).hardware.comparison(EVERY)
    assert sorted(found.groups[0].run_ids) == ["p1/r", "p2/r"]
    assert [g.runs for g in found.groups[0].gpus] == [1, 1]


@pytest.mark.parametrize("group_by", ["gpu", "label:", "config", "runs:a"])
def test_an_unknown_grouping_is_refused_with_the_accepted_forms(
    migrated_db: Database, group_by: str
) -> None:
    with pytest.raises(Rejected, match="parity, label:KEY or config:KEY"):
        Reads.over(migrated_db).hardware.comparison(EVERY, project="hw", group_by=group_by)
