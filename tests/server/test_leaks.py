"""What the runs page's change fingerprint is made of: the runs a reader's filters match and the
alerts firing on those runs, never anything of a project the reader cannot see."""

from __future__ import annotations

import itertools

import sqlalchemy as sa

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.schema import alarm_tables
from tests.factories import batch, ingest_batch

_ids = itertools.count()

EVERY = ReadScope.EVERY


def fire(db: Database, project: str, run_id: str, *, started_at: float) -> None:
    """An alert firing on a run, as the alarm service records one."""
    with db.write() as conn:
        alert = {"id": f"alert-{next(_ids)}", "rule_id": "rule-1", "rule_name": "k3 high",
                 "project": project, "run_id": run_id, "metric": "k3_kl", "severity": "warning",
                 "state": "firing", "step": 3, "value": 1.0, "started_at": started_at,
                 "silenced": False}  # fmt: skip
        conn.execute(sa.insert(alarm_tables.alerts).values(**alert))


def test_the_runs_fingerprint_moves_with_alerts_on_the_readers_runs_only(
    migrated_db: Database,
) -> None:
    ingest = IngestService(migrated_db)
    for project, run_id in (("a", "a-run"), ("b", "b-run"), ("a", "a-other")):
        ingest.ingest(ingest_batch(batch(run_id, range(5), project=project)), OPEN)
    ingest.close()
    query = Reads.over(migrated_db)

    def fingerprints() -> tuple[str, str, str]:
        return (
            query.runs.runs_version(ReadScope.of(["a"])),
            query.runs.runs_version(ReadScope.of(["b"])),
            query.runs.runs_version(ReadScope.of(["a"]), text="other"),
        )

    before = fingerprints()
    fire(migrated_db, "b", "b-run", started_at=2e9)
    after_b = fingerprints()
    assert after_b[0] == before[0] and after_b[2] == before[2]
    assert after_b[1] != before[1]
    fire(migrated_db, "a", "a-run", started_at=2e9 + 1)
    after_a = fingerprints()
    assert after_a[0] != after_b[0]  # an alert on a listed run changes the list
    assert after_a[2] == after_b[2]  # ... one on a run the filter leaves out does not
