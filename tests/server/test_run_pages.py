"""The runs list, paged by the database: every run once, in order, with filters and sorts done in
SQL — on both databases."""

from __future__ import annotations

import math

import pytest

from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.factories import ingest_batch

EVERY = ReadScope.EVERY


def _make(ingest: IngestService, run_id: str, *, k3: float | None = None, **run: object) -> None:
    records = []
    if k3 is not None:
        records = [{"run_id": run_id, "step": 0, "source": "trainer", "metrics": {"k3_kl": k3}}]
    body = {"run": {"id": run_id, "project": "p", **run}, "records": records}
    ingest.ingest(ingest_batch(body), OPEN)


def _all_pages(query: Reads, *, between: object = None, **kwargs: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = query.runs.runs_page(EVERY, cursor=cursor, limit=7, **kwargs)  # type: ignore[arg-type]
        seen += [r.id for r in page.runs]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor
        if callable(between):
            between()


@pytest.mark.parametrize(
    ("sort", "descending"), [("activity", True), ("name", False), ("k3", True), ("created", False)]
)
def test_paging_returns_every_run_once_while_new_runs_arrive(
    migrated_db: Database, sort: str, descending: bool
) -> None:
    ingest = IngestService(migrated_db)
    rng_values = [1e-3 * (i % 7) if i % 5 else math.nan for i in range(40)]
    for i, k3 in enumerate(rng_values):
        _make(ingest, f"run-{i:02d}", k3=k3 if i % 9 else None)
    query = Reads.over(migrated_db)
    before = {r.id for r in query.runs.runs_page(EVERY, limit=100).runs}
    arrivals = iter(range(100))

    def a_new_run_arrives() -> None:
        n = next(arrivals)
        _make(ingest, f"late-{n:02d}", k3=1.0, name=f"{'a' if n % 2 else 'z'}-late")

    seen = _all_pages(query, between=a_new_run_arrives, sort=sort, descending=descending)
    ingest.close()
    assert len(seen) == len(set(seen)), "a run came twice"
    assert before <= set(seen), "a run present from the start was skipped"


def test_pages_follow_the_sort(migrated_db: Database) -> None:
    ingest = IngestService(migrated_db)
    for i, (name, k3) in enumerate([("b", 0.3), ("a", 0.1), ("d", math.nan), ("c", None)]):
        _make(ingest, f"r{i}", k3=k3, name=name)
    ingest.close()
    query = Reads.over(migrated_db)
    assert _all_pages(query, sort="name", descending=False) == ["r1", "r0", "r3", "r2"]
    # NaN sorts above every value (it is a collapse); no value yet, below every value.
    assert _all_pages(query, sort="k3", descending=True) == ["r2", "r0", "r1", "r3"]
    page = query.runs.runs_page(EVERY, sort="name", descending=False, limit=2)
    assert (len(page.runs), page.total) == (2, 4) and page.next_cursor is not None


def test_filters_run_in_the_database(migrated_db: Database) -> None:
    ingest = IngestService(migrated_db)
    _make(ingest, "x1", labels={"odd/key~": "v 1", "tier": ""}, tags=["fp32-head", "v1"])
    _make(ingest, "x2", labels={"tier": "gold"}, tags=["v0"], name="100%_done")
    _make(ingest, "x3", name="plain")
    ingest.close()
    query = Reads.over(migrated_db)

    def ids(**kwargs: object) -> list[str]:
        return sorted(r.id for r in query.runs.runs_page(EVERY, limit=50, **kwargs).runs)  # type: ignore[arg-type]

    assert ids(label="odd/key~=v 1") == ["x1"]
    assert ids(label="tier") == ["x1", "x2"]
    assert ids(label="tier=") == ["x1"]
    assert ids(tag="v0") == ["x2"]
    assert ids(tag="v") == []  # a tag is matched whole
    assert ids(text="100%") == ["x2"]
    assert ids(text="0%_d") == ["x2"] and ids(text="_") == ["x2"]  # % and _ taken literally
    assert ids(text="%") == ["x2"]
    assert query.runs.runs_page(EVERY, label="tier").total == 2


def test_a_cursor_from_elsewhere_is_refused(migrated_db: Database) -> None:
    query = Reads.over(migrated_db)
    with pytest.raises(Rejected, match="cursor"):
        query.runs.runs_page(EVERY, cursor="not-a-cursor")
    ingest = IngestService(migrated_db)
    for i in range(3):
        _make(ingest, f"c{i}")
    ingest.close()
    cursor = query.runs.runs_page(EVERY, limit=1, sort="name").next_cursor
    with pytest.raises(Rejected, match="another sort"):
        query.runs.runs_page(EVERY, cursor=cursor, sort="activity")
