"""Retention as an operator meets it: `mismatch retention` on a database file, the admin
endpoint, and the server's own schedule; and compaction done by the maintenance thread."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.maintenance import Maintenance
from server.services.reads.port import Reads
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork
from tests.factories import ingest_batch
from tests.waiting import wait_for

DAY = 86400.0
STEPS = 3000

EVERY = ReadScope.EVERY


def mismatch(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(*args)


def _fill(db: Database, runs: dict[str, str], steps: int = STEPS) -> None:
    """`runs`: run id → project; every run gets `steps` steps of two metrics."""
    ingest = IngestService(db)
    for run, project in runs.items():
        ingest.ingest(ingest_batch({"run": {"id": run, "project": project}}), OPEN)
        records = [
            {
                "run_id": run,
                "step": s,
                "source": "trainer",
                "metrics": {"k3_kl": 1e-3 + (s == 1234) * 5.0, "grad_norm": 0.5},
            }
            for s in range(steps)
        ]
        ingest.ingest(ingest_batch({"records": records}), OPEN)
    ingest.close()


def _age(db: Database, run: str, days: float) -> None:
    """Make a run look quiet for `days`."""
    with db.write() as conn:
        conn.execute(
            sa.text("UPDATE runs SET last_seen = :t, created_at = :t WHERE id = :id"),
            {"t": time.time() - days * DAY, "id": run},
        )


def _raw_values(db: Database, run: str) -> int:
    with db.read() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT (SELECT count(*) FROM points p JOIN series s ON s.id = p.series_id "
                    "JOIN runs r ON r.pk = s.run_pk WHERE r.id = :id) + (SELECT count(*) FROM "
                    "points_hot h JOIN series s ON s.id = h.series_id JOIN runs r "
                    "ON r.pk = s.run_pk WHERE r.id = :id)"
                ),
                {"id": run},
            ).scalar_one()
        )


@pytest.fixture
def aged(tmp_path: Path) -> Path:
    """A database file with an old run and a recent one in project `a`, an old one in `b`."""
    path = tmp_path / "aged.duckdb"
    db = Database(str(path))
    migrate.upgrade(db)
    _fill(db, {"old-a": "a", "new-a": "a", "old-b": "b"})
    _age(db, "old-a", 200)
    _age(db, "old-b", 200)
    _age(db, "new-a", 10)
    db.dispose()
    return path


def test_the_cli_drops_old_raw_values_and_keeps_what_draws_them(aged: Path) -> None:
    dry = mismatch(
        "retention", "--older-than", "90d", "--project", "a", "--dry-run", "--db", str(aged)
    )
    assert dry.returncode == 0, dry.stderr
    assert "would drop the raw values of 1 runs" in dry.stdout and "old-a" in dry.stdout
    db = Database(str(aged))
    assert _raw_values(db, "old-a") == 2 * STEPS  # a dry run drops nothing
    db.dispose()

    done = mismatch("retention", "--older-than", "90d", "--project", "a", "--db", str(aged))
    assert done.returncode == 0, done.stderr
    assert "dropped the raw values of 1 runs (6,000 values)" in done.stdout
    assert re.search(r"disk: [\d.,]+ MiB before, [\d.,]+ MiB after", done.stdout), done.stdout

    db = Database(str(aged))
    query = Reads.over(db)
    assert _raw_values(db, "old-a") == 0
    assert _raw_values(db, "new-a") == _raw_values(db, "old-b") == 2 * STEPS  # other runs stay
    assert (
        query.runs.get_run(EVERY, "old-a").raw_dropped
        and not query.runs.get_run(EVERY, "new-a").raw_dropped
    )
    old = query.series.series(
        EVERY, "old-a", "k3_kl", step_min=1200, step_max=1300, max_points=1000
    )
    new = query.series.series(
        EVERY, "new-a", "k3_kl", step_min=1200, step_max=1300, max_points=1000
    )
    assert old.rollup_only and not new.rollup_only
    assert len(new.points) == 101 and max(p.max or 0 for p in old.points) == 5.001  # spike kept
    assert query.runs.last_step(EVERY, "old-a") == STEPS - 1  # the run record and its head stay
    db.dispose()

    again = mismatch("retention", "--older-than", "90d", "--project", "a", "--db", str(aged))
    assert "dropped the raw values of 0 runs" in again.stdout  # nothing left to drop


def test_the_cli_refuses_an_age_it_cannot_read(aged: Path) -> None:
    result = mismatch("retention", "--older-than", "ninety days", "--db", str(aged))
    assert result.returncode != 0
    assert "an age like 90d" in result.stderr


def test_admins_retain_over_http(server_factory: Any, aged: Path) -> None:
    db = Database(str(aged))
    tokens = TokenService(db)
    admin_a = tokens.create(project="a", scope="admin")[1]
    reader_a = tokens.create(project="a", scope="read")[1]
    db.dispose()
    server = server_factory(aged)

    def retain(body: dict[str, Any], token: str) -> httpx.Response:
        return server.post("/api/v1/maintenance/retention", body, token=token)

    assert retain({"older_than_s": 90 * DAY}, reader_a).status_code == 403
    bad = retain({"older_than_s": -1}, admin_a)
    assert bad.status_code == 422 and "older_than_s" in bad.text
    done = retain({"older_than_s": 90 * DAY, "project": "a"}, admin_a)
    assert done.status_code == 200, done.text
    assert done.json()["runs"] == ["old-a"] and done.json()["values"] == 2 * STEPS
    assert server.query("/api/v1/runs/old-a", token=admin_a)["raw_dropped"] is True
    assert server.query("/api/v1/runs/new-a", token=admin_a)["raw_dropped"] is False


def test_the_maintenance_thread_compacts_and_retains(migrated_db: Database) -> None:
    maintenance = Maintenance(migrated_db, hot_rows=1000, quiet_s=0.2, retention_days=1.0)
    maintenance.start()
    try:
        ingest = IngestService(migrated_db, listeners=[maintenance])
        ingest.ingest(ingest_batch({"run": {"id": "stale"}}), OPEN)
        _age(migrated_db, "stale", 3)
        records = [
            {"run_id": "live", "step": s, "source": "trainer", "metrics": {"k3_kl": 1e-3}}
            for s in range(2000)
        ]
        ingest.ingest(ingest_batch({"run": {"id": "live"}, "records": records}), OPEN)
        ingest.close()

        def compacted_and_retained() -> bool:
            with migrated_db.read() as conn:
                hot = conn.execute(sa.text("SELECT count(*) FROM points_hot")).scalar_one()
                dropped = conn.execute(
                    sa.text("SELECT count(*) FROM runs WHERE raw_dropped_at IS NOT NULL")
                ).scalar_one()
            return (hot, dropped) == (0, 1)

        wait_for(compacted_and_retained, 60, message="the thread neither compacted nor retained")
        assert _raw_values(migrated_db, "live") == 2000 and maintenance.rounds >= 1
        assert not Reads.over(migrated_db).runs.get_run(EVERY, "live").raw_dropped
    finally:
        maintenance.stop()


def test_retention_drops_the_token_exemplars_of_old_runs_only(migrated_db: Database) -> None:
    from server.storage.writing import retention
    from tests.factories import parity_report

    ingest = IngestService(migrated_db)
    for run in ("old", "new"):
        ingest.ingest(ingest_batch(parity_report(run, tokens=256, top=8, uniform=8)), OPEN)
    ingest.close()
    _age(migrated_db, "old", 200)
    query = Reads.over(migrated_db)
    assert len(query.runs.exemplars(EVERY, "old")) == len(query.runs.exemplars(EVERY, "new")) == 16

    result = retention.drop_raw(migrated_db, older_than_s=90 * DAY)
    assert result.runs == ["old"] and result.exemplars == 16
    assert (
        query.runs.exemplars(EVERY, "old") == [] and len(query.runs.exemplars(EVERY, "new")) == 16
    )
    assert query.runs.get_run(EVERY, "old").kind == "parity"  # the report itself stays
