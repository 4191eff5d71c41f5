"""The read side's lighter reads, straight on a database of each kind."""

from __future__ import annotations

from typing import Any

import pytest

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.factories import ingest_batch

EVERY = ReadScope.EVERY


@pytest.fixture
def query(migrated_db: Database) -> Any:
    ingest = IngestService(migrated_db)
    for run_id, project, config in (
        ("a", "p1", {"engine": {"logprobs_mode": "processed_logprobs"}}),
        ("b", "p1", {"engine": {"logprobs_mode": "raw_logprobs"}}),
        ("c", "p2", {}),
    ):
        body = {
            "run": {"id": run_id, "name": f"run {run_id}", "project": project, "config": config}
        }
        ingest.ingest(ingest_batch(body), OPEN)
    ingest.close()
    return Reads.over(migrated_db)


def test_run_configs_in_the_order_asked_without_unknown_runs(query: Reads) -> None:
    found = query.runs.run_configs(EVERY, ["b", "missing", "a"])
    assert [(c.id, c.name) for c in found] == [("b", "run b"), ("a", "run a")]
    assert found[0].config == {"engine": {"logprobs_mode": "raw_logprobs"}}
    assert [c.id for c in query.runs.run_configs(ReadScope.of(["p2"]), ["a", "c"])] == ["c"]
    assert query.runs.run_configs(EVERY, []) == []
