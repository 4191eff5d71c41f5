"""`mismatch import tensorboard` on event files written by torch's own SummaryWriter."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.importers.stored import count, mismatch, runs, same, series_of, snapshot, stored

SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter


def k3(s: int) -> float:
    return 1e-4 * (1 + s % 7)


def probs_diff(s: int) -> float:
    return 0.01 + s / 1000


def write_verl_run(logdir: Path, steps: range, *, hparams: bool = True) -> None:
    """A verl-like run: the names verl logs, a user metric, a histogram, a NaN, hparams."""
    writer = SummaryWriter(str(logdir))
    for s in steps:
        writer.add_scalar("rollout_corr/k3_kl", k3(s), s)
        writer.add_scalar("training/rollout_probs_diff_mean", probs_diff(s), s)
        writer.add_scalar("actor/grad_norm", math.nan if s == 3 else 1.0 + s, s)
        writer.add_scalar("timing_s/gen", 2.0 * s, s)
        writer.add_histogram("actor/logits", np.array([0.1, 0.2, float(s)]), s)
    if hparams:
        writer.add_hparams({"lr": 1e-6, "rollout": "vllm", "tp": 2}, {"hparam/score": 0.5})
    writer.close()


def test_verl_names_land_under_canonical_names_with_config_labels_and_gpu(tmp_path: Path) -> None:
    write_verl_run(tmp_path / "logs" / "grpo-h100", range(10))
    db = tmp_path / "m.duckdb"
    result = mismatch(
        "import", "tensorboard", tmp_path / "logs", "--framework", "verl",
        "--framework-version", "0.7.0", "--gpu", "NVIDIA H100 80GB HBM3", "--label", "team=rl",
        "--project", "postmortem", "--db", db,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    values = stored(db)
    assert {m for _, m in values} >= {"k3_kl", "prob_diff_mean", "grad_norm", "timing_s/gen"}
    assert not {m for _, m in values} & {"rollout_corr/k3_kl", "actor/grad_norm", "actor/logits"}
    k3_kl = series_of(values, "k3_kl")
    assert sorted(k3_kl) == list(range(10))
    assert all(same(k3_kl[s], k3(s)) for s in range(10))
    assert all(same(series_of(values, "prob_diff_mean")[s], probs_diff(s)) for s in range(10))
    assert math.isnan(series_of(values, "grad_norm")[3])  # NaN is data
    (run_id, run), *others = runs(db).items()
    assert not others
    assert (run["project"], run["status"]) == ("postmortem", "finished")
    assert run["labels"] == {"team": "rl"}
    assert run["gpus"] == ["NVIDIA H100 80GB HBM3"]
    config = run["config"]
    assert config["lr"] == pytest.approx(1e-6)
    assert (config["rollout"], config["tp"]) == ("vllm", 2)
    assert config["framework"] == {"name": "verl", "version": "0.7.0"}
    assert config["imported_from"]["kind"] == "tensorboard"
    assert config["imported_from"]["source"].endswith("grpo-h100")
    assert "actor/logits: not a scalar (histo)" in result.output
    assert f"run {run_id}" in result.output


def test_second_import_adds_nothing(tmp_path: Path) -> None:
    write_verl_run(tmp_path / "run", range(20), hparams=False)
    db = tmp_path / "m.duckdb"
    assert mismatch("import", "tensorboard", tmp_path / "run", "--db", db).exit_code == 0
    before = snapshot(db)
    again = mismatch("import", "tensorboard", tmp_path / "run", "--db", db, "--full")
    assert again.exit_code == 0, again.output
    assert snapshot(db) == before
    assert count(db) == 20 * 4
    assert "0 new, 20 already stored" in again.output


def test_import_resumes_from_the_last_stored_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_verl_run(run, range(30), hparams=False)
    db = tmp_path / "m.duckdb"
    assert mismatch("import", "tensorboard", run, "--db", db).exit_code == 0
    write_verl_run(run, range(30, 50), hparams=False)  # the job went on: a second event file
    again = mismatch("import", "tensorboard", run, "--db", db)
    assert again.exit_code == 0, again.output
    assert "21 sent, 20 new, 1 already stored" in again.output  # from step 29 on
    assert sorted(series_of(stored(db), "rollout_corr/k3_kl")) == list(range(50))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_file_fails_naming_it_and_stores_nothing(tmp_path: Path, damage: str) -> None:
    write_verl_run(tmp_path / "logs" / "good", range(10), hparams=False)
    write_verl_run(tmp_path / "logs" / "bad", range(10), hparams=False)
    (event_file,) = (tmp_path / "logs" / "bad").glob("*tfevents*")
    data = bytearray(event_file.read_bytes())
    if damage == "truncate":
        data = data[:-5]
    else:
        data[len(data) // 2] ^= 0x40
    event_file.write_bytes(bytes(data))
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "tensorboard", tmp_path / "logs", "--db", db)
    assert result.exit_code != 0
    assert str(event_file) in result.output
    assert ("truncated" if damage == "truncate" else "corrupt") in result.output
    assert not db.exists() or count(db) == 0


def test_unknown_framework_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    write_verl_run(tmp_path / "run", range(2), hparams=False)
    result = mismatch("import", "tensorboard", tmp_path / "run", "--framework", "verI")
    assert result.exit_code == 2
    assert "unknown framework 'verI'" in result.output and "trl" in result.output
