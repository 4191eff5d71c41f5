"""The Parity page shows the engine against itself: the figures a stored report carries, one
row per batch size, and a sentence where a report was made without the check."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.pages import parity
from dashboard.pages.parity_self import NOT_RUN
from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from tests.components import find
from tests.factories import ingest_batch, record

# The page builds Dash's DataTable, which announces its own future removal.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:\s*The dash_table.DataTable will be removed:DeprecationWarning"
)

SELF = {  # as `mismatch parity` stores them on the step-0 record (fp32 on this CPU)
    "self_engine_batch_b1": 1.0,
    "self_engine_batch_b4": 4.0,
    "self_logp_diff_max_b4": 3.34e-6,
    "self_logp_diff_mean_b4": 2.39e-7,
    "self_diverged_b4": 0.0,
    "self_engine_batch_b16": 16.0,
    "self_logp_diff_max_b16": 3.3e-6,
    "self_logp_diff_mean_b16": 2.24e-7,
    "self_diverged_b16": 1.0,
    "self_first_divergence_b16": 7.0,
}


def _page(migrated_db: Any, metrics: dict[str, float]) -> Any:
    ingest = IngestService(migrated_db)
    run = {"id": "parity-a", "project": "p", "name": "parity a", "kind": "parity"}
    body = {"run": run, "records": [record("parity-a", 0, {"k3_kl": 1e-8, **metrics})]}
    ingest.ingest(ingest_batch(body), OPEN)
    ingest.close()
    reports = parity.fetch(Reads.over(migrated_db), ReadScope.EVERY, ["parity-a"], None)
    _, metrics_table, *_ = parity.view(reports, 0)
    return metrics_table


def test_the_self_check_is_a_row_per_batch_size_with_its_figures(migrated_db: Any) -> None:
    table = find(_page(migrated_db, SELF), "parity-self-table")
    names = [c["id"] for c in table.columns]
    assert names == [
        "report", "batch", "engine_batch", "logp_diff_max", "logp_diff_mean", "diverged",
        "first_divergence",
    ]  # fmt: skip
    rows = {row["batch"]: row for row in table.data}
    assert list(rows) == ["1", "4", "16"]
    assert rows["4"]["logp_diff_max"] == "3.34e-06" and rows["4"]["engine_batch"] == "4"
    assert rows["16"]["diverged"] == "1" and rows["16"]["first_divergence"] == "7"
    assert rows["1"]["logp_diff_max"] == "—"  # the reference compares with nothing


def test_a_report_made_without_the_check_says_so(migrated_db: Any) -> None:
    page = _page(migrated_db, {})
    assert find(page, "parity-self-none").children == NOT_RUN
