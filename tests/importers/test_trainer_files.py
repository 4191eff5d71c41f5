"""The files trainers write import like any other source, and every import says what it found.

A TRL run's `trainer_state.json` and a script's CSV with a `step` column go through a running
server with an ingest token; an import of several runs whose last is bad stores none of them; a
verl fork's export that logs `training/vllm_kl` is told, with the exact `--map` to pass, that no
mismatch signal was stored; `--framework auto` tells each run's framework from its names; and
two imports of one file under two `--as-run` ids show as two names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from server.importers import table as table_source
from server.importers import trainer_state
from server.importers.core import SourceError
from tests.conftest import ServerProcess
from tests.importers.public_shapes import (
    fork_vllm_kl,
    step_csv,
    trl_logp_diff,
    trl_ratio,
    trl_trainer_state,
    verl_fork_export,
)
from tests.importers.stored import mismatch, runs, stored

Factory = Callable[..., ServerProcess]


def _server_with_ingest_token(tmp_path: Path, factory: Factory) -> tuple[ServerProcess, str]:
    db = tmp_path / "team.duckdb"
    made = mismatch("token", "create", "--db", db, "--project", "team", "--scope", "ingest")
    assert made.exit_code == 0, made.output
    return factory(db), made.stdout.strip()


def test_a_trl_trainer_state_imports_through_the_server_with_its_signal_named(
    tmp_path: Path, server_factory: Factory
) -> None:
    server, token = _server_with_ingest_token(tmp_path, server_factory)
    output_dir = tmp_path / "grpo-qwen"
    trl_trainer_state(output_dir, steps=12, checkpoint=12)
    done = mismatch(
        "import", "trainer-state", output_dir, "--framework", "trl",
        "--url", server.url, "--token", token,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "mismatch signal: abs_logp_diff_mean, ratio_mean@trl" in done.output
    assert "train_runtime: the Trainer's end-of-training summary" in done.output
    server.stop()
    values = stored(Path(server.db))
    (run_id,) = {run for run, _ in values}
    assert run_id.startswith("hf-grpo-qwen-")
    assert values[(run_id, "abs_logp_diff_mean")] == {s: trl_logp_diff(s) for s in range(1, 13)}
    assert values[(run_id, "ratio_mean@trl")] == {s: trl_ratio(s) for s in range(1, 13)}
    assert "train_runtime" not in {metric for _, metric in values}
    row = runs(Path(server.db))[run_id]
    assert row["project"] == "team" and row["name"] == "grpo-qwen"
    assert row["config"]["trainer_state"]["max_steps"] == 12


def test_a_step_column_csv_imports_through_the_server(
    tmp_path: Path, server_factory: Factory
) -> None:
    server, token = _server_with_ingest_token(tmp_path, server_factory)
    log = step_csv(tmp_path / "my-run.csv", steps=6)
    done = mismatch("import", "table", log, "--url", server.url, "--token", token)
    assert done.exit_code == 0, done.output
    assert "mismatch signal: k3_kl" in done.output
    assert "skipped note: not numeric" in done.output
    server.stop()
    values = stored(Path(server.db))
    (run_id,) = {run for run, _ in values}
    assert values[(run_id, "k3_kl")] == {s: 2e-4 * (s + 1) for s in range(6)}
    assert values[(run_id, "reward_mean")] == {s: 0.1 * s for s in range(6)}


def test_an_import_of_two_runs_whose_second_is_bad_stores_nothing(
    tmp_path: Path, server_factory: Factory
) -> None:
    server, token = _server_with_ingest_token(tmp_path, server_factory)
    good = step_csv(tmp_path / "good.csv", steps=5)
    bad = step_csv(tmp_path / "bad.csv", steps=5, bad_row=3)
    refused = mismatch("import", "table", good, bad, "--url", server.url, "--token", token)
    assert refused.exit_code == 2
    assert "bad.csv" in refused.output and "line 5" in refused.output
    assert "nothing of it was imported" in refused.output
    server.stop()
    assert stored(Path(server.db)) == {}
    assert runs(Path(server.db)) == {}


def test_a_fork_export_logging_vllm_kl_is_told_the_exact_map(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    export = verl_fork_export(tmp_path / "fork-bf16.csv", steps=8)
    told = mismatch("import", "wandb", export, "--framework", "verl", "--db", db)
    assert told.exit_code == 0, told.output
    assert "no mismatch signal stored" in told.output
    assert "training/vllm_kl (likely k1_kl)" in told.output
    assert "import again with: --map training/vllm_kl=k1_kl" in told.output
    again = mismatch(
        "import", "wandb", export, "--framework", "verl", "--map", "training/vllm_kl=k1_kl",
        "--db", db, "--full",
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "mismatch signal: k1_kl" in again.output
    (run_id,) = {run for run, _ in stored(db)}
    assert stored(db)[(run_id, "k1_kl")] == {s: fork_vllm_kl(s) for s in range(8)}


def test_framework_auto_tells_each_runs_framework_from_its_names(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    trl_trainer_state(tmp_path / "grpo", steps=3)
    done = mismatch("import", "trainer-state", tmp_path / "grpo", "--framework", "auto", "--db", db)
    assert done.exit_code == 0, done.output
    assert "framework trl (told from its names)" in done.output
    assert any(metric == "abs_logp_diff_mean" for _, metric in stored(db))
    plain = step_csv(tmp_path / "plain.csv", steps=3)
    unknown = mismatch("import", "table", plain, "--framework", "auto", "--db", db)
    assert unknown.exit_code == 0, unknown.output
    assert "no framework's names found" in unknown.output


def test_as_run_gives_a_second_import_of_one_file_its_own_name(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    log = step_csv(tmp_path / "run.csv", steps=3)
    assert mismatch("import", "table", log, "--as-run", "run-bf16", "--db", db).exit_code == 0
    named = mismatch("import", "table", log, "--as-run", "run-int8", "--name", "int8 rollout",
                     "--db", db)  # fmt: skip
    assert named.exit_code == 0, named.output
    names = {run_id: row["name"] for run_id, row in runs(db).items()}
    assert names == {"run-bf16": "run-bf16", "run-int8": "int8 rollout"}
    two = mismatch("import", "table", log, log, "--name", "x", "--db", db)
    assert two.exit_code == 2 and "--name names one run" in two.output


def test_a_step_repeated_in_the_log_history_merges_train_and_eval_values(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(
        '{"log_history": [{"step": 5, "loss": 1.0, "epoch": 0.5},'
        ' {"step": 5, "eval_loss": 2.0, "eval_runtime": 3.0},'
        ' {"step": 6, "loss": NaN, "note": "x"}]}\n'
    )
    run = trainer_state.read(path)
    assert run.steps[5] == {"loss": 1.0, "eval_loss": 2.0, "eval_runtime": 3.0}
    assert math.isnan(run.steps[6]["loss"]) and run.skipped["note"] == "not a number (str)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"log_history": [{"step": 1, "loss": 1.0}', "corrupt or truncated JSON"),
        ('{"log_history": [{"loss": 1.0}]}\n', "has no integer 'step'"),
        ('{"global_step": 3}\n', "has no 'log_history' list"),
    ],
)
def test_a_broken_trainer_state_is_refused_naming_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    with pytest.raises(SourceError, match=problem):
        trainer_state.read(path)


def test_a_directory_without_a_state_takes_its_latest_checkpoint(tmp_path: Path) -> None:
    trl_trainer_state(tmp_path / "out", steps=4, checkpoint=4)
    trl_trainer_state(tmp_path / "out", steps=10, checkpoint=10)
    trl_trainer_state(tmp_path / "out", steps=2, checkpoint=2)
    run = trainer_state.read(tmp_path / "out")
    assert max(run.steps) == 10 and run.name == "out"
    assert run.key == trainer_state.read(tmp_path / "out" / "checkpoint-2").key


def test_jsonl_nested_keys_join_with_slashes_and_null_means_not_logged(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(
        '{"step": 1, "rollout": {"k3": 0.001}, "loss": null, "time": 1750000000}\n'
        '{"step": 2, "rollout": {"k3": Infinity}, "loss": 0.5}\n'
    )
    run = table_source.read(path)
    assert run.steps[1] == {"rollout/k3": 0.001}
    assert run.steps[2]["rollout/k3"] == math.inf and run.steps[2]["loss"] == 0.5
    assert run.times == {1: 1750000000.0}


def test_a_wandb_export_given_as_a_table_is_pointed_to_the_wandb_importer(tmp_path: Path) -> None:
    export = verl_fork_export(tmp_path / "w.csv", steps=2)
    with pytest.raises(SourceError, match="use `mismatch import wandb`"):
        table_source.read(export)


def test_a_table_cut_short_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.csv"
    path.write_text("step,k3_kl\n0,0.001\n1,0.00")
    with pytest.raises(SourceError, match="truncated"):
        table_source.read(path)


def test_a_db_import_of_a_database_a_server_holds_names_that_servers_url(
    tmp_path: Path, server_factory: Factory
) -> None:
    server, _ = _server_with_ingest_token(tmp_path, server_factory)
    log = step_csv(tmp_path / "run.csv", steps=2)
    refused = mismatch("import", "table", log, "--db", server.db)
    assert refused.exit_code == 2
    assert f"--url {server.url} --token TOKEN" in refused.output
