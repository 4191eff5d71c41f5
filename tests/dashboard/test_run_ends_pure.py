"""The runs list and run page say how and when a run ended."""

from __future__ import annotations

from datetime import UTC, datetime

from dashboard.pages.runs_data import status_cell


def test_an_ended_run_reads_as_ended_with_its_time() -> None:
    at = datetime(2026, 11, 28, 14, 3, tzinfo=UTC).timestamp()
    assert status_cell("finished", at) == "finished 11-28 14:03 UTC"
    assert status_cell("failed", at) == "failed 11-28 14:03 UTC"


def test_a_running_run_reads_as_its_activity() -> None:
    assert status_cell("live", None) == "live"
    assert status_cell("idle", None) == "idle"
