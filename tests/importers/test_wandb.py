"""`mismatch import wandb` on run history exports.

No `wandb` package here to call `Run.history()` with (it needs W&B's servers), so the CSV is
written the way that export writes it: `run.history()` is a pandas DataFrame with `_step`,
`_runtime`, `_timestamp` and one column per logged key, NaN where a key was not logged
(wandb/wandb: wandb/apis/public/history.py), and `DataFrame.to_csv` puts the unnamed index column
first and writes NaN as an empty cell. The Parquet file is written with pyarrow, nulls for "not
logged". The config is a `config.yaml` in the layout W&B keeps in a run's files.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.importers.stored import count, mismatch, runs, same, series_of, snapshot, stored

START = 1_760_000_000.0
# verl logs to W&B with no prefix; `critic/score/mean` and the probs diff are logged every 2nd step
VERL = (
    "rollout_corr/k3_kl",
    "rollout_corr/kl",
    "training/rollout_probs_diff_max",
    "critic/score/mean",
)
CANONICAL = {
    "rollout_corr/k3_kl": "k3_kl",
    "rollout_corr/kl": "k1_kl",
    "training/rollout_probs_diff_max": "prob_diff_max",
    "critic/score/mean": "reward_mean",
}


def value(name: str, step: int) -> float | None:
    if name in VERL[2:] and step % 2:
        return None
    if name == "rollout_corr/kl" and step == 5:
        return math.inf  # ±Inf is data
    return (VERL.index(name) + 1) * 0.01 + step * 1e-4


def history(steps: int) -> tuple[list[str], list[list[object]]]:
    columns = ["_step", "_runtime", "_timestamp", *VERL, "media/samples"]
    rows = [
        [s, 3.0 * s, START + 3.0 * s, *(value(n, s) for n in VERL), "{'_type': 'table-file'}"]
        for s in range(steps)
    ]
    return columns, rows


def write_csv(path: Path, steps: int) -> Path:
    columns, rows = history(steps)
    lines = ["," + ",".join(columns)]
    for index, row in enumerate(rows):
        cells = ["" if v is None else repr(v) if isinstance(v, float) else str(v) for v in row]
        cells = ['"' + c + '"' if "," in c else c for c in cells]
        lines.append(",".join([str(index), *cells]))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_parquet(path: Path, steps: int) -> Path:
    columns, rows = history(steps)
    pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)}), path)
    return path


CONFIG_YAML = """\
wandb_version: 1
_wandb:
  desc: null
  value:
    python_version: 3.11.9
actor_rollout_ref:
  desc: null
  value:
    rollout:
      name: vllm
      temperature: 1.0
algorithm:
  desc: null
  value:
    adv_estimator: grpo
"""


@pytest.mark.parametrize("write", [write_csv, write_parquet], ids=["csv", "parquet"])
def test_verl_names_land_under_canonical_names_with_config(tmp_path: Path, write) -> None:  # type: ignore[no-untyped-def]
    export = write(tmp_path / ("run-abc123." + ("csv" if write is write_csv else "parquet")), 10)
    (tmp_path / "config.yaml").write_text(CONFIG_YAML)
    db = tmp_path / "m.duckdb"
    result = mismatch(
        "import", "wandb", export, "--config", tmp_path / "config.yaml", "--framework", "verl",
        "--gpu", "NVIDIA L20", "--project", "pm", "--db", db,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    values = stored(db)
    for name, canonical in CANONICAL.items():
        series = series_of(values, canonical)
        expected = {s: value(name, s) for s in range(10) if value(name, s) is not None}
        assert sorted(series) == sorted(expected), canonical
        assert all(same(series[s], v) for s, v in expected.items())  # type: ignore[arg-type]
    assert series_of(values, "k1_kl")[5] == math.inf
    assert {m for _, m in values} == set(CANONICAL.values())
    (run,) = runs(db).values()
    assert run["config"]["actor_rollout_ref"] == {"rollout": {"name": "vllm", "temperature": 1.0}}
    assert run["config"]["algorithm"] == {"adv_estimator": "grpo"}
    assert "_wandb" not in run["config"]
    assert run["config"]["imported_from"] == {"kind": "wandb", "source": str(export)}
    assert (run["project"], run["gpus"], run["name"]) == ("pm", ["NVIDIA L20"], "run-abc123")
    assert "skipped media/samples: not numeric" in result.output


def test_wall_times_come_from_the_timestamp_column(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    assert mismatch("import", "wandb", write_csv(tmp_path / "r.csv", 4), "--db", db).exit_code == 0
    import sqlalchemy as sa

    from server.storage.db import Database

    database = Database(str(db))
    with database.read() as conn:
        times = [
            row[0] for row in conn.execute(sa.text("SELECT time FROM step_records ORDER BY step"))
        ]
    database.dispose()
    assert times == pytest.approx([START + 3.0 * s for s in range(4)])


def test_second_import_adds_nothing(tmp_path: Path) -> None:
    export = write_csv(tmp_path / "r.csv", 30)
    db = tmp_path / "m.duckdb"
    assert mismatch("import", "wandb", export, "--db", db).exit_code == 0
    before = snapshot(db)
    again = mismatch("import", "wandb", export, "--db", db, "--full")
    assert again.exit_code == 0, again.output
    assert snapshot(db) == before and "0 new, 30 already stored" in again.output


@pytest.mark.parametrize("cut", [7, 200])
def test_truncated_export_fails_naming_it_and_stores_nothing(tmp_path: Path, cut: int) -> None:
    good = write_csv(tmp_path / "good.csv", 20)
    bad = write_csv(tmp_path / "bad.csv", 20)
    bad.write_bytes(bad.read_bytes()[:-cut])
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", good, bad, "--db", db)
    assert result.exit_code != 0
    assert "bad.csv" in result.output and "truncated" in result.output
    assert not db.exists() or count(db) == 0


def test_truncated_parquet_fails_naming_it(tmp_path: Path) -> None:
    bad = write_parquet(tmp_path / "bad.parquet", 20)
    bad.write_bytes(bad.read_bytes()[:-30])
    result = mismatch("import", "wandb", bad, "--db", tmp_path / "m.duckdb")
    assert result.exit_code != 0 and "bad.parquet" in result.output


def test_label_option_must_be_key_value(tmp_path: Path) -> None:
    result = mismatch("import", "wandb", write_csv(tmp_path / "r.csv", 2), "--label", "oops")
    assert result.exit_code == 2 and "key=value" in result.output


def test_a_bad_project_stops_the_import_before_anything_is_written(tmp_path: Path) -> None:
    first, second = write_csv(tmp_path / "a.csv", 3), write_csv(tmp_path / "b.csv", 3)
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", first, second, "--project", "no spaces", "--db", db)
    assert result.exit_code == 2 and "project" in result.output
    assert not db.exists() or count(db) == 0
