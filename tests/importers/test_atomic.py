"""Imports are all or nothing: every row, cell count, metric count, name and byte of a source is
checked before the first write, so a bad file — even one whose only fault is its last row —
stores nothing, and the command says which file and which line, never with a traceback. Every
run of an import is checked before the first is written: a bad second run stores nothing of
the first, neither its values nor its run, into a database or through a server."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from server.cli.import_check import check
from server.importers import wandb as wandb_source
from server.importers.core import ImportFailed, Options, plan_run
from server.importers.writer import Writer
from server.storage.db import Database
from server.storage.schema import migrate
from tests.importers.stored import count, mismatch, runs, stored

LIMIT = 2000  # the ingest contract's metrics per record


def wide_csv(path: Path, *, rows: int, last_row_metrics: int) -> Path:
    """A W&B history export (pandas' CSV: index column first, empty cell for "not logged")
    with `last_row_metrics` metric columns; every row logs four of them except the last, which
    logs them all. Rows past the importer's 2,000-record batch, so a row-by-row writer would
    have stored the first batch before meeting the last row."""
    names = [f"m{i}" for i in range(last_row_metrics)]
    lines = [",".join(["", "_step", "_timestamp", *names])]
    for step in range(rows):
        last = step == rows - 1
        cells = [repr(0.5 + step + i) if last or i < 4 else "" for i in range(last_row_metrics)]
        lines.append(",".join([str(step), str(step), repr(1.7e9 + step), *cells]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_wandb_csv_whose_last_row_logs_too_many_metrics_stores_nothing(tmp_path: Path) -> None:
    export = wide_csv(tmp_path / "wide.csv", rows=2100, last_row_metrics=LIMIT + 1)
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", export, "--db", db)
    assert result.exit_code == 2, result.output
    assert "wide.csv" in result.output and "line 2101" in result.output
    assert f"{LIMIT + 1} metrics" in result.output
    assert not db.exists() or count(db) == 0


def test_a_wandb_csv_at_the_metric_limit_is_imported_whole(tmp_path: Path) -> None:
    export = wide_csv(tmp_path / "wide.csv", rows=2100, last_row_metrics=LIMIT)
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", export, "--db", db)
    assert result.exit_code == 0, result.output
    values = stored(db)
    assert sum(len(v) for v in values.values()) == 2099 * 4 + LIMIT
    (run_id,) = {run for run, _ in values}
    assert values[(run_id, f"m{LIMIT - 1}")] == {2099: 0.5 + 2099 + LIMIT - 1}


def test_a_plan_nobody_checked_against_the_contract_is_not_written(tmp_path: Path) -> None:
    export = wide_csv(tmp_path / "small.csv", rows=10, last_row_metrics=4)
    plan = plan_run(wandb_source.read(export), Options())
    db = tmp_path / "m.duckdb"
    database = Database(str(db))
    migrate.upgrade(database)
    writer = Writer.open(database)
    try:
        with pytest.raises(ImportFailed, match="not checked against the ingest contract"):
            writer.write(plan)
        assert writer.summary.values == 0
        check([plan])
        writer.write(plan)
    finally:
        writer.close()
        database.dispose()
    assert count(db) == 10 * 4


def test_a_last_row_with_more_cells_than_the_header_stores_nothing_and_names_its_line(
    tmp_path: Path,
) -> None:
    export = wide_csv(tmp_path / "ragged.csv", rows=2100, last_row_metrics=4)
    text = export.read_text()
    export.write_text(text.rstrip("\n") + "," + ",".join(["1.0"] * 2000) + "\n")
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", export, "--db", db)
    assert result.exit_code == 2, result.output
    assert "ragged.csv" in result.output and "line 2101" in result.output
    assert not db.exists() or count(db) == 0


def test_invalid_utf8_in_the_header_exits_2_naming_the_file_and_line(tmp_path: Path) -> None:
    export = tmp_path / "latin.csv"
    export.write_bytes(b",_step,k3_kl\xff\xfe\n0,0,0.001\n1,1,0.002\n")
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", export, "--db", db)
    assert result.exit_code == 2, result.output
    assert "latin.csv" in result.output and "line 1" in result.output
    assert "UTF-8" in result.output and "Traceback" not in result.output
    assert not db.exists() or count(db) == 0


def test_invalid_utf8_in_a_later_row_names_that_line(tmp_path: Path) -> None:
    good = wide_csv(tmp_path / "good.csv", rows=5, last_row_metrics=4)
    export = wide_csv(tmp_path / "cell.csv", rows=3000, last_row_metrics=4)
    lines = export.read_bytes().split(b"\n")
    head, _ = lines[2999].rsplit(b",", 1)
    lines[2999] = head + b",0.5\xc3"  # a cut two-byte sequence on line 3000
    export.write_bytes(b"\n".join(lines))
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", good, export, "--db", db)
    assert result.exit_code == 2, result.output
    assert "cell.csv" in result.output and "line 3000" in result.output
    assert not db.exists() or count(db) == 0


def test_a_config_file_that_is_not_utf8_exits_2_naming_it(tmp_path: Path) -> None:
    export = wide_csv(tmp_path / "r.csv", rows=3, last_row_metrics=4)
    config = tmp_path / "config.yaml"
    config.write_bytes(b"lr:\n  value: 1e-6\nname:\n  value: caf\xe9\n")
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", export, "--config", config, "--db", db)
    assert result.exit_code == 2, result.output
    assert "config.yaml" in result.output and "line 4" in result.output
    assert not db.exists() or count(db) == 0


def test_a_tensorboard_step_over_the_metric_limit_stores_nothing(tmp_path: Path) -> None:
    """No per-line check for event files: the contract check of every record before the first
    write stops it, naming the run and the step."""
    summary_writer = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    writer = summary_writer(str(tmp_path / "run"))
    for step in range(2100):
        for i in range(4 if step < 2099 else LIMIT + 1):
            writer.add_scalar(f"m{i}", math.sqrt(step + i), step)
    writer.close()
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "tensorboard", tmp_path / "run", "--db", db)
    assert result.exit_code == 2, result.output
    assert "step 2099" in result.output and "at most 2000 metrics" in result.output
    assert not db.exists() or count(db) == 0


def test_a_source_whose_name_is_not_utf8_exits_2_naming_it(tmp_path: Path) -> None:
    """A name becomes the run's id, name and provenance: one that is not text stops the import
    before anything is read into the database, with its odd bytes escaped."""
    good = wide_csv(tmp_path / "good.csv", rows=3, last_row_metrics=4)
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run-\xff.csv"))
    odd.write_bytes(good.read_bytes())
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "wandb", good, odd, "--db", db)
    assert result.exit_code == 2, result.output
    assert "run-\\xff.csv" in result.output and "not UTF-8" in result.output
    assert not db.exists() or count(db) == 0


def _event_run(logdir: Path, *, last_step_metrics: int) -> Path:
    """A TensorBoard run of five steps logging four scalars each, its last step
    `last_step_metrics` of them."""
    summary_writer = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    writer = summary_writer(str(logdir))
    for step in range(5):
        for i in range(4 if step < 4 else last_step_metrics):
            writer.add_scalar(f"m{i}", 0.5 + step + i, step)
    writer.close()
    return logdir


def _first_fine_second_over_the_limit(tmp_path: Path) -> tuple[Path, Path]:
    """Two runs for one import: the first fine, the second with a step over the metric limit,
    which event files are read without checking (the contract check finds it)."""
    return (
        _event_run(tmp_path / "first", last_step_metrics=4),
        _event_run(tmp_path / "second", last_step_metrics=LIMIT + 1),
    )


def test_a_second_run_the_contract_refuses_stores_nothing_of_the_first(tmp_path: Path) -> None:
    first, second = _first_fine_second_over_the_limit(tmp_path)
    db = tmp_path / "m.duckdb"
    result = mismatch("import", "tensorboard", first, second, "--db", db)
    assert result.exit_code == 2, result.output
    assert "run tb-second-" in result.output and "step 4" in result.output
    assert "at most 2000 metrics" in result.output and "nothing was imported" in result.output
    assert not db.exists() or (runs(db) == {} and count(db) == 0)


def test_a_second_run_the_contract_refuses_sends_nothing_of_the_first(
    tmp_path: Path, server_factory: Any
) -> None:
    first, second = _first_fine_second_over_the_limit(tmp_path)
    server = server_factory(tmp_path / "served.duckdb")
    result = mismatch("import", "tensorboard", first, second, "--url", server.url)
    assert result.exit_code == 2, result.output
    assert "run tb-second-" in result.output and "step 4" in result.output
    server.stop()
    assert runs(Path(server.db)) == {} and count(Path(server.db)) == 0
