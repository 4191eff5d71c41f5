"""The run page's likely-cause section: built from the run's own attribution over the page's
step range, the likeliest failure mode first with its evidence and every check's verdict."""

from __future__ import annotations

from typing import Any

from dashboard import ids
from dashboard.pages import run
from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.components import find
from tests.factories import ingest_batch
from tests.server.test_attribution_api import _offset_run


def _text(component: Any) -> str:
    if isinstance(component, str):
        return component
    children = getattr(component, "children", None)
    parts = children if isinstance(children, list) else [children]
    return " ".join(_text(c) for c in parts if c is not None)


def test_run_page_names_the_likely_cause_with_its_checks(migrated_db: Database) -> None:
    ingest = IngestService(migrated_db)
    ingest.ingest(ingest_batch(_offset_run("raw")), OPEN)
    ingest.close()
    page = run.layout(Reads.over(migrated_db), ReadScope.EVERY, {"run": "raw", "step_min": "5"})
    section = find(page, ids.RUN_ATTRIBUTION)
    assert section is not None
    text = _text(section)
    assert "Likely cause" in text and "raw instead of processed logprobs" in text
    assert "15 steps read" in text  # the page's range, steps 5 … 19
    assert "pass mean_offset" in text and "not run gpu_contrast" in text
    assert "engine.logprobs_mode = raw_logprobs raises it" in text


def test_run_page_says_there_is_nothing_to_read_when_the_run_logs_no_signal(
    migrated_db: Database,
) -> None:
    ingest = IngestService(migrated_db)
    body = {
        "run": {"id": "quiet"},
        "records": [{"run_id": "quiet", "step": 0, "source": "trainer", "metrics": {"loss": 1.0}}],
    }
    ingest.ingest(ingest_batch(body), OPEN)
    ingest.close()
    section = find(
        run.layout(Reads.over(migrated_db), ReadScope.EVERY, {"run": "quiet"}), ids.RUN_ATTRIBUTION
    )
    # It used to say "unknown" (above the healthy level): a finding about data never read.
    assert section is not None
    text = _text(section)
    assert "no mismatch signal" in text and "nothing to read" in text and "--map" in text
    assert "unknown" not in text and "score" not in text
