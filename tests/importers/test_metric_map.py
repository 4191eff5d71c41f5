"""`mismatch import ... --map SOURCE=CANONICAL`: a name no framework table knows lands under the
canonical name the user gives, so the default alarm pack reads it; the run's config records the
map; the user's word beats the framework table's for the names it lists; a bad pair stops the
command (exit 2, naming the pair) before anything is read or written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboard import ids
from dashboard.pages import run as run_page
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.components import find
from tests.importers.stored import mismatch, runs, stored

START = 1_760_000_000.0
STEPS = 60
RISE = 40  # k3 jumps from ≈1e-3 to 0.2 here: what a collapsing run's vllm-kl does


def k3(step: int) -> float:
    noise = np.random.default_rng(step).normal(0.0, 0.3)
    return 0.2 if step >= RISE else float(1e-3 * math.exp(noise))


def write_export(path: Path, columns: dict[str, Any], steps: int = STEPS) -> Path:
    """A W&B history export (`run.history().to_csv()`, as tests/importers/test_wandb.py writes
    one): the unnamed index first, then `_step`, `_runtime`, `_timestamp` and a column per key.
    `columns` maps each key to its value at a step."""
    names = ["_step", "_runtime", "_timestamp", *columns]
    lines = ["," + ",".join(names)]
    for s in range(steps):
        cells = [s, 3.0 * s, START + 3.0 * s, *(f(s) for f in columns.values())]
        lines.append(",".join([str(s), *(repr(c) for c in cells)]))
    path.write_text("\n".join(lines) + "\n")
    return path


FORK = {
    "training/vllm_kl": k3,  # an older verl fork's own name for k3
    "mean_logp_diff": lambda s: 0.03 + s * 1e-4,  # a launcher's mean |d|
    "timing_s/gen": lambda s: 2.0 * s,
}


def test_map_puts_custom_names_under_canonical_ones_and_the_config_records_it(
    tmp_path: Path,
) -> None:
    export = write_export(tmp_path / "fork.csv", FORK)
    db = tmp_path / "m.duckdb"
    mapping = ("--map", "training/vllm_kl=k3_kl", "--map", " mean_logp_diff = abs_logp_diff_mean")
    result = mismatch("import", "wandb", export, *mapping, "--db", db, "--as-run", "fork")
    assert result.exit_code == 0, result.output
    assert "metrics: 2 mapped, 1 kept, 0 skipped" in result.output
    values = stored(db)
    assert {metric for _, metric in values} == {"k3_kl", "abs_logp_diff_mean", "timing_s/gen"}
    assert values[("fork", "k3_kl")] == {s: pytest.approx(k3(s)) for s in range(STEPS)}
    assert values[("fork", "abs_logp_diff_mean")][10] == pytest.approx(0.031)
    config = runs(db)["fork"]["config"]
    assert config["metric_map"] == {
        "training/vllm_kl": "k3_kl",
        "mean_logp_diff": "abs_logp_diff_mean",
    }


def test_the_run_page_names_the_users_map_and_only_where_there_is_one(tmp_path: Path) -> None:
    export = write_export(tmp_path / "fork.csv", FORK, steps=3)
    db = tmp_path / "m.duckdb"
    mapping = ("--map", "training/vllm_kl=k1_kl", "--map", "mean_logp_diff=abs_logp_diff_mean")
    assert mismatch("import", "wandb", export, *mapping, "--db", db, "--as-run", "m").exit_code == 0
    assert mismatch("import", "wandb", export, "--db", db, "--as-run", "plain").exit_code == 0
    database = Database(str(db))
    try:
        reads, every = Reads.over(database), ReadScope.EVERY
        line = find(run_page.layout(reads, every, {"run": "m"}), ids.RUN_METRIC_MAP).children
        plain = find(run_page.layout(reads, every, {"run": "plain"}), ids.RUN_METRIC_MAP).children
    finally:
        database.dispose()
    assert line == (
        "metrics mapped by the user: training/vllm_kl → k1_kl, mean_logp_diff → abs_logp_diff_mean"
    )
    assert plain is None


def test_map_wins_over_the_framework_table_for_the_names_it_lists(tmp_path: Path) -> None:
    # verl's table puts rollout_corr/kl under k1_kl; this fork logs a k3 there, and verl's own
    # k3 beside it under another name: the user's map takes k3_kl, verl's key keeps its name.
    columns = {
        "rollout_corr/kl": lambda s: 2e-3,
        "rollout_corr/k3_kl": lambda s: 5e-4,
        "actor/grad_norm": lambda s: 0.8,
    }
    export = write_export(tmp_path / "verl.csv", columns, steps=3)
    db = tmp_path / "m.duckdb"
    args = ("--framework", "verl", "--map", "rollout_corr/kl=k3_kl", "--db", db, "--as-run", "v")
    result = mismatch("import", "wandb", export, *args)
    assert result.exit_code == 0, result.output
    values = stored(db)
    assert {metric for _, metric in values} == {"k3_kl", "rollout_corr/k3_kl", "grad_norm"}
    assert set(values[("v", "k3_kl")].values()) == {2e-3}
    assert set(values[("v", "rollout_corr/k3_kl")].values()) == {5e-4}
    assert runs(db)["v"]["config"]["framework"]["name"] == "verl"


def test_a_default_pack_rule_reads_a_mapped_name_in_a_backtest(
    tmp_path: Path, server_factory: Any
) -> None:
    export = write_export(tmp_path / "fork.csv", FORK)
    db = tmp_path / "m.duckdb"
    for run, extra in (("mapped", ("--map", "training/vllm_kl=k3_kl")), ("unmapped", ())):
        result = mismatch("import", "wandb", export, *extra, "--db", db, "--as-run", run)
        assert result.exit_code == 0, result.output
    server = server_factory(db)

    def backtest(run: str) -> dict[str, Any]:
        result = mismatch("alarm", "backtest", "--run", run, "--json", "--url", server.url)
        assert result.exit_code == 0, result.output
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    mapped = backtest("mapped")
    assert mapped["records"] == STEPS
    high = [a for a in mapped["alerts"] if a["rule_name"] == "vllm-kl high"]
    assert len(high) == 1
    assert high[0]["step"] == RISE + 4  # above 0.02 for 5 consecutive steps
    assert high[0]["value"] == pytest.approx(0.2)
    # The same values under the fork's own name: no rule reads them.
    unmapped = backtest("unmapped")
    assert (unmapped["records"], unmapped["alerts"]) == (0, [])


@pytest.mark.parametrize(
    ("pair", "words"),
    [
        (
            "training/vllm_kl=k3kl",
            "training/vllm_kl=k3kl: 'k3kl' is not a canonical metric name (did you mean k3_kl?)",
        ),
        ("training/vllm_kl", "'training/vllm_kl' is not SOURCE=CANONICAL"),
        ("=k1_kl", "'=k1_kl' is not SOURCE=CANONICAL"),
        ("training/vllm_kl=", "'training/vllm_kl=' is not SOURCE=CANONICAL"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ("tensorboard", "logs"),
        ("mlflow", "--tracking-uri", "sqlite:///mlflow.db"),
        ("wandb", "history.csv"),
    ],
)
def test_a_bad_map_pair_exits_2_naming_it_before_anything_is_read(
    tmp_path: Path, command: tuple[str, ...], pair: str, words: str
) -> None:
    db = tmp_path / "m.duckdb"
    result = mismatch(
        "import", *command, "--map", "mean_logp_diff=abs_logp_diff_mean", "--map", pair, "--db", db
    )
    assert result.exit_code == 2
    assert f"error: --map {words}" in result.output
    assert not db.exists()


def test_a_source_mapped_twice_is_refused(tmp_path: Path) -> None:
    args = ("--map", "a=k1_kl", "--map", "a=k3_kl", "--db", tmp_path / "m.duckdb")
    result = mismatch("import", "wandb", tmp_path / "h.csv", *args)
    assert result.exit_code == 2
    assert "error: --map 'a' is mapped twice: to k1_kl and to k3_kl" in result.output


@pytest.mark.parametrize("source", ["tensorboard", "mlflow", "wandb"])
def test_each_import_command_documents_the_map(source: str) -> None:
    result = mismatch("import", source, "--help")
    assert result.exit_code == 0, result.output
    assert "--map" in result.output
    assert "SOURCE=CANONICAL" in result.output


def test_the_server_reads_the_map_where_the_collectors_record_it() -> None:
    from collectors import adapters
    from server.domain.metrics import METRIC_MAP_KEY

    assert METRIC_MAP_KEY == adapters.METRIC_MAP_KEY
