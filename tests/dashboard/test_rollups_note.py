"""Views say when they are drawn from rollups only: after retention dropped a run's raw values,
its run page and any comparison it is in name it."""

from __future__ import annotations

from dashboard import ids
from dashboard.pages import compare, run
from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.figures.text import ROLLUPS_ONLY
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.writing import retention
from tests.components import find
from tests.factories import ingest_batch


def test_a_retained_run_is_named_as_drawn_from_rollups(migrated_db: Database) -> None:
    ingest = IngestService(migrated_db)
    for run_id, name in (("old", "old run"), ("new", "new run")):
        records = [
            {"run_id": run_id, "step": s, "source": "trainer", "metrics": {"k3_kl": 1e-3}}
            for s in range(500)
        ]
        body = {"run": {"id": run_id, "name": name}, "records": records}
        ingest.ingest(ingest_batch(body), OPEN)
    ingest.close()
    with migrated_db.write() as conn:
        conn.exec_driver_sql("UPDATE runs SET last_seen = 0, created_at = 0 WHERE id = 'old'")
    assert retention.drop_raw(migrated_db, older_than_s=86400.0).runs == ["old"]
    reads, every = Reads.over(migrated_db), ReadScope.EVERY

    old_page = find(run.layout(reads, every, {"run": "old"}), ids.RUN_SUBTITLE)
    new_page = find(run.layout(reads, every, {"run": "new"}), ids.RUN_SUBTITLE)
    assert ROLLUPS_ONLY in old_page.children and ROLLUPS_ONLY not in new_page.children

    figure, _, _ = compare.view(reads, every, ["new", "old"], "new", "k3_kl", "overlay", 3.0, 5)
    assert figure["layout"]["title"]["text"].endswith(f"{ROLLUPS_ONLY}: old run")
    alone, _, _ = compare.view(reads, every, ["new"], "new", "k3_kl", "overlay", 3.0, 5)
    assert ROLLUPS_ONLY not in alone["layout"]["title"]["text"]
