"""One stream's steps evaluated in step order whatever happens to its batches, on a real DuckDB
file through the write path: a restart resumes from the states it saved, a late step corrects
the alerts raised without it (and the receivers hear of it), a first message's diagnosis is
made off the ingest path, and state keys read back as they were written."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from server.alarms.delivering.diagnosis import Diagnostician
from server.alarms.delivering.drafts import Drafts
from server.alarms.evaluating.history import StoredHistory
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.alarm_keys import StateKey, StreamKey
from server.domain.alarms import Receiver, Rule
from server.domain.records import BatchWrite, Record, RunUpsert, StoredRecord
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.alarms.outbox import DRAFT_PREFIX
from server.storage.db import Database
from server.storage.schema import alarm_tables, migrate
from server.storage.writing.ingest import write_batches

HIGH = Rule(
    id="r_high",
    project="p",
    name="three high",
    kind="threshold",
    metric="x",
    params={"threshold": 1.0, "direction": "above", "for_steps": 3, "resolve_steps": 1},
)


def _db(tmp_path: Path) -> Database:
    db = Database(str(tmp_path / "streams.duckdb"))
    migrate.upgrade(db)
    return db


def _service(db: Database, *rules: Rule) -> AlarmService:
    store = AlarmStore(db)
    for rule in rules:
        store.save_rule(rule)
    service = AlarmService(store, base_url="http://monitor")
    service.reload()
    return service


def _send(db: Database, service: AlarmService | None, values: dict[int, dict[str, float]]) -> None:
    """Store one batch of run "r" (steps → metrics) and, with a service, evaluate it."""
    records = [Record("r", s, "trainer", "t0", 1e9 + s, None, None, m) for s, m in values.items()]
    batch = BatchWrite(run=RunUpsert("r", project="p"), records=records)
    with db.write() as conn:
        (result,) = write_batches(conn, db, [batch])
    if service is not None:
        service.on_ingested(result)


def _alerts(db: Database) -> list[tuple[object, ...]]:
    return sorted(
        (a.rule_name, a.step, a.state, a.resolved_step)
        for a in AlarmStore(db).alerts(run_id="r")
        if a.rule_id == HIGH.id
    )


def _x(*steps: int, high: tuple[int, ...] = ()) -> dict[int, dict[str, float]]:
    return {s: {"x": 5.0 if s in high else 0.0} for s in steps}


def test_a_restarted_service_resumes_from_the_states_it_saved(tmp_path: Path) -> None:
    db = _db(tmp_path)
    first = _service(db, HIGH)
    _send(db, first, _x(0, 1, 2, 3, 4, high=(3, 4)))
    first.flush_states()
    again = _service(db)  # two breaching steps are in its saved state: the third fires
    _send(db, again, _x(5, 6, high=(5,)))
    assert _alerts(db) == [("three high", 5, "resolved", 6)]
    db.dispose()


def test_steps_stored_but_never_evaluated_are_evaluated_when_the_stream_goes_on(
    tmp_path: Path,
) -> None:
    db = _db(tmp_path)
    first = _service(db, HIGH)
    _send(db, first, _x(0, 1, 2))
    first.flush_states()
    _send(db, None, _x(3, 4, high=(3, 4)))  # stored; the server died before evaluating it
    again = _service(db)
    _send(db, again, _x(5, 6, high=(5,)))
    assert _alerts(db) == [("three high", 5, "resolved", 6)]
    db.dispose()


class _Counting(StoredHistory):
    """The stored history, counting how often a stream's steps are read back."""

    reads = 0

    def read(self, *args: Any, **kwargs: Any) -> list[StoredRecord] | None:
        self.reads += 1
        return super().read(*args, **kwargs)


def test_a_stream_that_logs_every_tenth_step_is_evaluated_as_it_comes(tmp_path: Path) -> None:
    db = _db(tmp_path)
    history = _Counting(db)
    AlarmStore(db).save_rule(HIGH)
    service = AlarmService(AlarmStore(db), base_url="http://monitor", history=history)
    for first in range(0, 200, 40):
        steps = range(first, first + 40, 10)
        _send(db, service, _x(*steps, high=tuple(s for s in steps if 100 <= s < 140)))
    assert history.reads == 1  # its first batch, a new stream: nothing read back after it
    assert _alerts(db) == [("three high", 120, "resolved", 140)]
    db.dispose()


def test_a_late_step_withdraws_the_alert_raised_without_it_and_the_receiver_hears(
    tmp_path: Path,
) -> None:
    db = _db(tmp_path)
    service = _service(db, HIGH)
    AlarmStore(db).add_receiver(Receiver("rcv", "p", "http://hook.example/x", "standard", None, 0))
    service.reload()
    _send(db, service, _x(0, 1, 2, 3, 4, 6, high=(3, 4, 6)))  # step 5 is not there yet
    assert _alerts(db) == [("three high", 6, "firing", None)]
    _send(db, service, _x(5))  # it was below: 3, 4, 6 were never three in a row
    assert _alerts(db) == []
    with db.read() as conn:
        bodies = [json.loads(r.body) for r in conn.execute(sa.select(alarm_tables.outbox.c.body))]
    db.dispose()
    assert sorted(b["type"] for b in bodies) == ["alert.firing", "alert.resolved"]


def test_a_first_message_owes_its_diagnosis_to_the_delivery_worker(tmp_path: Path) -> None:
    db = _db(tmp_path)
    k3 = Rule(
        id="r_k3",
        project="p",
        name="k3 high",
        kind="threshold",
        metric="k3_kl",
        params={"threshold": 0.1, "direction": "above", "for_steps": 1},
    )
    service = _service(db, k3)
    AlarmStore(db).add_receiver(Receiver("rcv", "p", "http://hook.example/x", "slack", None, 0))
    service.reload()
    _send(db, service, {0: {"k3_kl": 0.01}, 1: {"k3_kl": 0.5}})
    with db.read() as conn:
        (draft,) = conn.execute(sa.select(alarm_tables.outbox.c.body)).scalars()
    assert draft.startswith(DRAFT_PREFIX)  # the ingest path left the diagnosis to the worker
    with db.write() as conn:
        assert alarm_deliveries.take_in(conn) == 1
        assert alarm_deliveries.any_due(conn, now=time.time() + 1) is False  # not made yet
    assert Drafts(db, Diagnostician(db, base_url="http://monitor")).prepare() == 1
    with db.read() as conn:
        (body,) = conn.execute(sa.select(alarm_tables.deliveries.c.body)).scalars()
        (kept,) = conn.execute(sa.select(alarm_tables.outbox.c.body)).scalars()
    db.dispose()
    text = json.dumps(json.loads(body))
    assert not body.startswith(DRAFT_PREFIX) and "reference run" in text  # Slack, diagnosed
    assert kept == draft  # the outbox row stays as recording wrote it


NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,20}", fullmatch=True)


@given(
    project=NAMES,
    stream=st.tuples(NAMES, st.sampled_from(["trainer", "rollout"]), NAMES),
    metric=st.text(min_size=1, max_size=30),
    scope=st.sampled_from(["metric", "stream", "run", "rule"]),
)
def test_a_state_key_reads_back_as_it_was_written(
    project: str, stream: tuple[str, str, str], metric: str, scope: str
) -> None:
    where = StreamKey(project, *stream)
    key = {
        "metric": StateKey.of_metric("r_1", where, metric),
        "stream": StateKey.of_stream("r_1", where),
        "run": StateKey.of_run("r_1", project, stream[0]),
        "rule": StateKey.of_rule("r_1"),
    }[scope]
    assert StateKey.parse("r_1", project, key.series_text()) == key


@given(project=NAMES, stream=st.tuples(NAMES, st.sampled_from(["trainer", "rollout"]), NAMES))
def test_a_stream_cursor_key_reads_back_as_it_was_written(
    project: str, stream: tuple[str, str, str]
) -> None:
    where = StreamKey(project, *stream)
    assert StreamKey.parse(where.text()) == where
    assert StreamKey.parse(StateKey.of_stream("r_1", where).series_text()) is None  # no project
