"""Imported runs are ordinary runs: the query layer's hardware breakdown and series read them
like runs a collector sent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.services.query import QueryService
from server.storage.db import Database
from tests.importers.stored import mismatch
from tests.importers.test_wandb import CANONICAL, value, write_csv


def test_imported_runs_show_in_the_hardware_view_and_series(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    for gpu, name in (("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100")):
        export = write_csv(tmp_path / f"{name}.csv", 40)
        args = ("import", "wandb", export, "--framework", "verl", "--gpu", gpu, "--db", db)
        assert mismatch(*args, "--as-run", name).exit_code == 0
    database = Database(str(db))
    try:
        query = QueryService(database)
        rows = {row.gpu: row for row in query.hardware(metric="k3_kl")}
        assert set(rows) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
        expected = [value("rollout_corr/k3_kl", s) for s in range(40)]
        for row in rows.values():
            assert (row.runs, row.steps, row.nonfinite) == (1, 40, 0)
            assert row.median == pytest.approx(float(np.median(expected)))
        series = query.series("h100", CANONICAL["training/rollout_probs_diff_max"], max_points=100)
        assert [p.step for p in series.points] == list(range(0, 40, 2))
    finally:
        database.dispose()
