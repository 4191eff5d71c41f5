"""The demo's summary table: each scenario over all its steps, not its last one."""

from __future__ import annotations

import os

import numpy as np
import pytest

from demo.cli import summary_table
from demo.loop import StepReport, summarise


def reports(k3: list[float]) -> list[StepReport]:
    return [
        StepReport("raw-logprobs", step, value, 10.0 * step, 0.01, 0.1 * step, 1000.0)
        for step, value in enumerate(k3)
    ]


def test_summary_is_the_median_over_steps_when_the_policy_collapses_late() -> None:
    # k3 falls to ~1e-8 once the toy policy is deterministic: the last step hides the scenario
    k3 = [0.31, 0.12, 0.05, 0.02, 1e-3, 1e-6, 1e-8, 6.5e-9]
    summary = summarise(reports(k3))
    assert summary.k3_kl == pytest.approx(float(np.median(np.asarray(k3))))
    assert (summary.k3_min, summary.k3_max) == (6.5e-9, 0.31)
    assert summary.steps == len(k3)
    assert summary.reward == pytest.approx(float(np.median(0.1 * np.arange(len(k3)))))


def test_summary_table_shows_median_and_range_per_scenario() -> None:
    table = summary_table([summarise(reports([0.3, 0.02, 1e-8]))])
    row = next(line for line in table.splitlines() if line.startswith("raw-logprobs"))
    assert row.split()[1] == "2.000e-02"
    assert "1.0e-08 … 3.0e-01" in row
    assert "median" in table


def test_summary_of_no_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="no steps"):
        summarise([])


def test_demo_stores_its_parity_report_with_the_public_command_in_the_demo_project() -> None:
    from pathlib import Path

    from demo.cli import parity_command
    from demo.loop import PROJECT, TEMPERATURE

    cmd = parity_command(Path("/models/tiny"), "http://127.0.0.1:8765", "demo")
    assert cmd[1:5] == ["-m", "server.cli", "parity", "/models/tiny"]
    options = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert options == {
        "--temperature": str(TEMPERATURE),
        "--url": "http://127.0.0.1:8765",
        "--project": PROJECT,
        "--label": "demo=demo",
    }
    # every option is one the parity command takes (its --help, from the same interpreter)
    import subprocess

    wide = {**os.environ, "COLUMNS": "200"}
    usage = subprocess.run(
        [*cmd[:4], "--help"], capture_output=True, text=True, check=True, env=wide
    ).stdout
    assert all(f"{option} " in usage for option in options)
