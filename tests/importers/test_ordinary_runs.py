"""Imported runs are ordinary runs: the read side's hardware breakdown and series read them,
and alarm backtests replay them, like runs a collector sent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.alarms.configuring.backtest import Backtester
from server.alarms.store import AlarmStore
from server.domain.alarms import WouldBeAlert
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.importers.stored import mismatch
from tests.importers.test_wandb import CANONICAL, value, write_csv

EVERY = ReadScope.EVERY


def test_imported_runs_show_in_the_hardware_view_and_series(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    for gpu, name in (("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100")):
        export = write_csv(tmp_path / f"{name}.csv", 40)
        args = ("import", "wandb", export, "--framework", "verl", "--gpu", gpu, "--db", db)
        assert mismatch(*args, "--as-run", name).exit_code == 0
    database = Database(str(db))
    try:
        query = Reads.over(database)
        rows = {row.gpu: row for row in query.hardware.pooled(EVERY, metric="k3_kl")}
        assert set(rows) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
        expected = [value("rollout_corr/k3_kl", s) for s in range(40)]
        for row in rows.values():
            assert (row.runs, row.steps, row.nonfinite) == (1, 40, 0)
            assert row.median == pytest.approx(float(np.median(expected)))
        series = query.series.series(
            EVERY, "h100", CANONICAL["training/rollout_probs_diff_max"], max_points=100
        )
        assert [p.step for p in series.points] == list(range(0, 40, 2))
    finally:
        database.dispose()


def test_imported_runs_replay_through_an_alarm_backtest(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    export = write_csv(tmp_path / "verl.csv", 40)
    args = ("import", "wandb", export, "--framework", "verl", "--db", db, "--as-run", "old")
    assert mismatch(*args).exit_code == 0
    k3 = [value("rollout_corr/k3_kl", s) for s in range(40)]
    threshold = 0.01205  # k3 rises through it between steps 20 and 21
    first_above = next(s for s, v in enumerate(k3) if v is not None and v > threshold)
    database = Database(str(db))
    try:
        backtester = Backtester(AlarmStore(database))

        def replay(limit: float) -> list[WouldBeAlert]:
            draft = {
                "name": "k3 high",
                "kind": "threshold",
                "metric": "k3_kl",
                "params": {"threshold": limit, "for_steps": 2},
            }
            result = backtester.run(run_id="old", drafts=[draft])
            assert result.records == 40
            return result.alerts

        alerts = replay(threshold)
        assert len(alerts) == 1
        assert alerts[0].metric == "k3_kl"
        assert first_above <= alerts[0].step <= first_above + 1
        assert replay(1.0) == []  # the verl values landed as k3_kl, under no other name
    finally:
        database.dispose()
