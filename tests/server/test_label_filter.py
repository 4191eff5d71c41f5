"""One label filter, one meaning, in every place that filters by label: the runs list, alarm
rules and silences.

    KEY         the label is present, whatever its value
    KEY=VALUE   the label equals VALUE
    KEY=        the label equals the empty string
    !KEY        the label is absent
"""

from __future__ import annotations

import pytest

from server.auth import OPEN
from server.domain.alarms import Rule, Silence
from server.domain.labels import InvalidLabelFilter, LabelFilter
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.factories import ingest_batch

RUN_LABELS = {"empty": {"tier": ""}, "gold": {"tier": "gold"}, "none": {}}
# filter → the runs it selects
CASES = [
    ("tier", {"empty", "gold"}),
    ("tier=gold", {"gold"}),
    ("tier=", {"empty"}),
    ("tier=silver", set()),
    ("other", set()),
    ("!tier", {"none"}),
    ("!other", {"empty", "gold", "none"}),
]

EVERY = ReadScope.EVERY


@pytest.mark.parametrize(("text", "selected"), CASES)
def test_the_filter_matches_labels(text: str, selected: set[str]) -> None:
    f = LabelFilter.parse(text)
    assert {run for run, labels in RUN_LABELS.items() if f.matches(labels)} == selected


@pytest.mark.parametrize("text", ["", "=gold", " =x"])
def test_a_filter_without_a_key_is_refused(text: str) -> None:
    with pytest.raises(InvalidLabelFilter, match="KEY, KEY=VALUE or !KEY"):
        LabelFilter.parse(text)


@pytest.mark.parametrize("text", ["!", " ! ", "!tier=gold"])
def test_an_absence_filter_takes_a_key_and_no_value(text: str) -> None:
    with pytest.raises(InvalidLabelFilter, match="takes a key and no value"):
        LabelFilter.parse(text)


@pytest.mark.parametrize("text", ["ti\x00er", "!tier\x00", "tier=go\x00ld", "tier=\ud800"])
def test_a_filter_no_database_can_compare_is_refused(text: str) -> None:
    """Rules, silences and every list filter through this parse: NUL (PostgreSQL's text
    refuses it) or a lone surrogate (a JSON body can spell one) never reaches a query."""
    with pytest.raises(InvalidLabelFilter, match="without NUL or lone surrogates"):
        LabelFilter.parse(text)


@pytest.mark.parametrize("text", ["tier", "tier=gold", "tier=", "!tier"])
def test_a_filter_reads_back_as_it_was_written(text: str) -> None:
    assert str(LabelFilter.parse(text)) == text


@pytest.fixture
def query(migrated_db: Database) -> Reads:
    ingest = IngestService(migrated_db)
    for run_id, labels in RUN_LABELS.items():
        body = {"run": {"id": run_id, "project": "p", "labels": labels}}
        ingest.ingest(ingest_batch(body), OPEN)
    ingest.close()
    return Reads.over(migrated_db)


@pytest.mark.parametrize(("text", "selected"), CASES)
def test_the_runs_list_filters_by_label(query: Reads, text: str, selected: set[str]) -> None:
    assert {r.id for r in query.runs.list_runs(EVERY, label=text)} == selected


def test_the_runs_list_refuses_a_filter_without_a_key(query: Reads) -> None:
    with pytest.raises(Rejected, match="KEY, KEY=VALUE or !KEY"):
        query.runs.list_runs(EVERY, label="=gold")


@pytest.mark.parametrize(("text", "selected"), CASES)
def test_an_alarm_rule_watches_runs_by_label(text: str, selected: set[str]) -> None:
    rule = Rule(id="r", project="p", name="n", kind="threshold", metric="k3_kl", label=text)
    watched = {
        run
        for run, labels in RUN_LABELS.items()
        if rule.matches(
            project="p", run_id=run, labels=labels, source="trainer", gpu=None, metric="k3_kl"
        )
    }
    assert watched == selected


@pytest.mark.parametrize(("text", "selected"), CASES)
def test_a_silence_mutes_runs_by_label(text: str, selected: set[str]) -> None:
    rule = Rule(id="r", project="p", name="n", kind="threshold", metric="k3_kl")
    silence = Silence(
        "s", "p", until=2e9, rule_id=None, run_id=None, label=text, comment="", created_at=0.0
    )
    muted = {
        run
        for run, labels in RUN_LABELS.items()
        if silence.mutes(rule=rule, run_id=run, labels=labels, now=1e9)
    }
    assert muted == selected
