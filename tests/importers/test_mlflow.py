"""`mismatch import mlflow` on a SQLite tracking store written by the mlflow package itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.importers.stored import count, mismatch, runs, same, series_of, snapshot, stored

mlflow = pytest.importorskip("mlflow")

pytestmark = [
    pytest.mark.slow,  # MLflow builds its SQLite schema with its own migrations: seconds
    # MLflow's store uses SQLAlchemy loader options that SQLAlchemy 2.1 deprecates.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mlflow.*"),
]

# TRL's GRPO trainer as the transformers Trainer's MLflow callback logs it ("train/" prefix).
TRL_NAMES = {
    "train/sampling/sampling_logp_difference/mean": "abs_logp_diff_mean",
    "train/clip_ratio/low_mean": "clip_rate_low",
    "train/reward": "reward_mean",
}


def trl_value(name: str, step: int) -> float:
    return (1 + list(TRL_NAMES).index(name)) * 0.001 * (step + 1)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """Two experiments; runs with TRL names, params, a user metric. → (URI, run name → id)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    ids = {}
    for experiment, run_name, steps in (("grpo", "h100", 12), ("grpo", "a100", 8), ("sft", "x", 3)):
        mlflow.set_experiment(experiment)
        with mlflow.start_run(run_name=run_name) as run:
            mlflow.log_params({"learning_rate": 1e-6, "beta": 0.0, "vllm_mode": "colocate"})
            for s in range(steps):
                metrics = {name: trl_value(name, s) for name in TRL_NAMES}
                metrics["train/tokens_per_s"] = 100.0 + s
                mlflow.log_metrics(metrics, step=s)
            ids[run_name] = run.info.run_id
    mlflow.set_tracking_uri("")
    return uri, ids


def test_trl_names_land_under_canonical_names_with_params_as_config(
    tmp_path: Path, store: tuple[str, dict[str, str]]
) -> None:
    uri, ids = store
    db = tmp_path / "m.duckdb"
    result = mismatch(
        "import", "mlflow", "--tracking-uri", uri, "--experiment", "grpo", "--framework", "trl",
        "--gpu", "NVIDIA A100-SXM4-80GB", "--label", "cluster=b", "--db", db,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stored_runs = runs(db)
    assert len(stored_runs) == 2  # the "sft" experiment stays out
    by_source = {
        r["config"]["imported_from"]["source"].rsplit("#", 1)[1]: r for r in stored_runs.values()
    }
    assert set(by_source) == {ids["h100"], ids["a100"]}
    config = by_source[ids["h100"]]["config"]
    assert config["learning_rate"] == "1e-06" and config["vllm_mode"] == "colocate"
    assert config["framework"] == {"name": "trl", "version": None}
    assert config["imported_from"]["kind"] == "mlflow"
    assert by_source[ids["h100"]]["labels"] == {"cluster": "b"}
    assert by_source[ids["h100"]]["name"] == "h100"
    values = stored(db)
    h100 = next(run_id for run_id, r in stored_runs.items() if r["name"] == "h100")
    for name, canonical in TRL_NAMES.items():
        series = values[(h100, canonical)]
        assert sorted(series) == list(range(12))
        assert all(same(series[s], trl_value(name, s)) for s in range(12))
        assert not any(m == name for _, m in values)
    assert sorted(values[(h100, "train/tokens_per_s")]) == list(range(12))
    assert "metrics: 3 mapped, 1 kept, 0 skipped" in result.output


def test_one_run_by_id_and_a_second_import_adds_nothing(
    tmp_path: Path, store: tuple[str, dict[str, str]]
) -> None:
    uri, ids = store
    db = tmp_path / "m.duckdb"
    args = ("import", "mlflow", "--tracking-uri", uri, "--run-id", ids["a100"], "--db", db)
    assert mismatch(*args, "--as-run", "a100-v1").exit_code == 0
    before = snapshot(db)
    assert len(before) == 8 * 4
    assert set(runs(db)) == {"a100-v1"}
    again = mismatch(*args, "--as-run", "a100-v1", "--full")
    assert again.exit_code == 0, again.output
    assert snapshot(db) == before
    assert "0 new, 8 already stored" in again.output
    assert same(series_of(stored(db), "train/reward")[7], trl_value("train/reward", 7))


def test_damaged_store_fails_naming_it_and_stores_nothing(
    tmp_path: Path, store: tuple[str, dict[str, str]]
) -> None:
    uri, _ = store
    damaged = tmp_path / "cut.db"
    data = Path(uri.removeprefix("sqlite:///")).read_bytes()
    damaged.write_bytes(data[: len(data) // 3])
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "mlflow", "--tracking-uri", f"sqlite:///{damaged}", "--db", db)
    assert result.exit_code != 0
    assert str(damaged) in result.output
    assert not db.exists() or count(db) == 0


def test_missing_store_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = mismatch("import", "mlflow", "--tracking-uri", f"sqlite:///{missing}")
    assert result.exit_code == 2
    assert "no such file" in result.output
    assert not missing.exists()
