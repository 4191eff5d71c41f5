"""The importers' pure core: names mapped exactly as `map_metrics` maps them, run ids, batches."""

from __future__ import annotations

import math
import random

import pytest

from collectors.adapters import map_metrics
from server.importers.core import ImportFailed, Options, SourceRun, plan_run, run_id_for

# verl keys that collide on k1_kl (the earlier key in verl's table wins; a key already named
# k1_kl wins over both) and slime's ratio mean, which also yields a transformed value.
NAMES = {
    "verl": [
        "rollout_corr/rollout_rs_token_k1_mean",
        "rollout_corr/kl",
        "k1_kl",
        "actor/grad_norm",
        "mine",
    ],
    "slime": ["train/tis", "train/mis_kl", "mine"],
}


def source(framework: str, steps: int, seed: int) -> SourceRun:
    rng = random.Random(seed)
    run = SourceRun(kind="wandb", key=f"/x/{framework}.csv", source="x", name="x")
    for step in range(steps):
        names = [n for n in NAMES[framework] if rng.random() < 0.7]
        rng.shuffle(names)  # the order of a step's keys decides nothing but ties: vary it
        for name in names:
            run.add(step, name, rng.choice([rng.random(), math.inf]), 1e9 + step)
    return run


@pytest.mark.parametrize("framework", list(NAMES))
def test_every_step_is_mapped_as_map_metrics_maps_it(framework: str) -> None:
    run = source(framework, 300, seed=7)
    plan = plan_run(run, Options(framework=framework))
    by_step = {r["step"]: r["metrics"] for r in plan.records}
    assert sorted(by_step) == sorted(s for s, v in run.steps.items() if v)
    for step, values in run.steps.items():
        if values:
            expected = map_metrics(framework, values).metrics
            assert by_step[step] == expected  # same names, same values, NaN-free here
    if framework == "slime":
        assert any("ratio_dev_1e4_seq" in m for m in by_step.values())


def test_names_are_counted_as_mapped_kept_or_skipped() -> None:
    run = SourceRun(kind="tensorboard", key="/r", source="/r", name="r")
    run.add(0, "rollout_corr/k3_kl", 1e-3, None)
    run.add(0, "timing_s/gen", 2.0, None)
    run.add(0, "x" * 201, 1.0, None)
    run.skipped["actor/logits"] = "not a scalar (histo)"
    plan = plan_run(run, Options(framework="verl"))
    assert plan.mapped == {"rollout_corr/k3_kl"}
    assert plan.kept == {"timing_s/gen"}
    assert set(plan.skipped) == {"actor/logits", "x" * 201}
    assert plan.records[0]["metrics"] == {"k3_kl": 1e-3, "timing_s/gen": 2.0}


def test_run_ids_are_stable_distinct_and_valid() -> None:
    a = run_id_for("tensorboard", "/logs/exp 1/grpo h100")
    assert a == run_id_for("tensorboard", "/logs/exp 1/grpo h100")
    assert a != run_id_for("tensorboard", "/other/grpo h100")
    assert a.startswith("tb-grpo-h100-")
    assert run_id_for("wandb", "/x/" + "é" * 300).startswith("wandb-run-")


def test_batches_resume_at_the_stored_last_step() -> None:
    run = SourceRun(kind="wandb", key="/r", source="/r", name="r")
    for step in (0, 2, 4, 6, 8):
        run.add(step, "k3_kl", 1.0, None)
    plan = plan_run(run, Options())
    assert [[r["step"] for r in b] for b in plan.batches(2, after=4)] == [[4, 6], [8]]
    assert [[r["step"] for r in b] for b in plan.batches(2, after=5)] == [[6, 8]]
    assert list(plan.batches(2, after=9)) == []


def test_unknown_framework_is_refused() -> None:
    with pytest.raises(ImportFailed, match="unknown framework 'vlle'"):
        plan_run(
            SourceRun(kind="wandb", key="/r", source="/r", name="r"), Options(framework="vlle")
        )


def test_fast_checksum_equals_tensorboards_own() -> None:
    pytest.importorskip("google_crc32c")
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from server.importers.tensorboard import fast_masked_crc32c

    fast = fast_masked_crc32c()
    assert fast is not None
    rng = random.Random(3)
    for size in (0, 1, 8, 77, 4096):
        data = bytes(rng.randrange(256) for _ in range(size))
        assert fast(data) == masked_crc32c(data)


def test_steps_outside_the_contracts_range_are_left_out_and_counted() -> None:
    run = SourceRun(kind="tensorboard", key="/r", source="/r", name="r")
    for step in (-1, 0, 2**53, 2**53 + 1):
        run.add(step, "k3_kl", 1.0, None)
    plan = plan_run(run, Options())
    assert [r["step"] for r in plan.records] == [0, 2**53]
    assert plan.steps_out_of_range == 2
