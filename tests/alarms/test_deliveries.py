"""The delivery worker's record against the outbox recording writes: a follow-up folds into the
first message while that has not been tried, else its fallback goes out on its own — whatever
order recording, taking in, making and claiming run in — and the outbox is never written by
delivery."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from server.alarms.store import AlarmStore
from server.domain.alarms import Receiver
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.alarms import outbox as alarm_outbox
from server.storage.alarms.outbox import Draft, OutboxMessage, Revision
from server.storage.db import Database
from server.storage.schema import alarm_tables as t
from server.storage.schema import migrate
from tests.budget import examples

NOW = 1_000.0
LATER = NOW + 3600  # every message is due by then


def _message(mid: str, body: str, *, receiver: str = "rcv") -> OutboxMessage:
    return OutboxMessage(mid, receiver, body, NOW, NOW)


def _revision(rid: str, of: str, body: str, fallback: str | None = None) -> Revision:
    return Revision(rid, "rcv", of, body, NOW, fallback)


def _record(db: Database, *rows: OutboxMessage | Revision) -> None:
    with db.write() as conn:
        alarm_outbox.record(
            conn,
            [r for r in rows if isinstance(r, OutboxMessage)],
            [r for r in rows if isinstance(r, Revision)],
        )


def _take_in(db: Database) -> int:
    with db.write() as conn:
        return alarm_deliveries.take_in(conn)


def _claim(db: Database) -> dict[str, str]:
    with db.write() as conn:
        return {c.message_id: c.body for c in alarm_deliveries.claim_due(conn, LATER, lease_s=60)}


def _finish(db: Database, message_id: str, *, delivered: bool) -> None:
    changes = {"attempts": 1, "lease_until": None}
    changes |= {"delivered_at": LATER} if delivered else {"next_attempt_at": NOW}
    with db.write() as conn:
        alarm_deliveries.finish(conn, message_id, changes)


def _state(db: Database, message_id: str) -> dict[str, object]:
    with db.read() as conn:
        (row,) = alarm_deliveries.of(conn, [message_id])
    return row


@pytest.fixture
def db(migrated_db: Database) -> Database:
    AlarmStore(migrated_db).add_receiver(
        Receiver("rcv", "p", "http://hook.example/x", "standard", None, 0)
    )
    return migrated_db


def test_a_follow_up_recorded_before_the_first_try_goes_out_in_the_message(db: Database) -> None:
    _record(db, _message("m", "opened"))
    assert _take_in(db) == 1
    _record(db, _revision("r1", "m", "opened+a", fallback="escalated a"))
    _record(db, _revision("r2", "m", "opened+a+b"))
    assert _take_in(db) == 2
    assert _claim(db) == {"m": "opened+a+b"}  # the latest revision; no fallback goes out
    assert _state(db, "r1")["folded_into"] == "m" and _state(db, "r2")["folded_into"] == "m"


def test_a_follow_up_recorded_after_the_first_try_sends_its_fallback_or_nothing(
    db: Database,
) -> None:
    _record(db, _message("m", "opened"))
    _take_in(db)
    assert _claim(db) == {"m": "opened"}  # leased: tried, whatever the answer
    _record(db, _revision("r1", "m", "opened+a", fallback="escalated a"))
    _record(db, _revision("r2", "m", "opened+a+b"))
    _take_in(db)
    _finish(db, "m", delivered=False)
    assert _claim(db) == {"m": "opened", "r1": "escalated a"}  # the retry keeps its body
    r2 = _state(db, "r2")
    assert r2["source_id"] is None and r2["folded_into"] is None  # nothing of its own to send


def test_a_follow_up_of_a_message_its_receiver_never_had_sends_its_fallback(
    db: Database,
) -> None:
    """A receiver added after the incident opened has no first message to fold into."""
    _record(db, _revision("r1", "m_never", "opened+a", fallback="escalated a"))
    _take_in(db)
    assert _claim(db) == {"r1": "escalated a"}


def test_a_message_and_its_follow_ups_recorded_in_one_round_go_out_as_the_last(
    db: Database,
) -> None:
    _record(db, _message("m", "opened"), _revision("r1", "m", "opened+a"))
    _record(db, _revision("r2", "m", "opened+a+b"))
    _take_in(db)
    assert _claim(db) == {"m": "opened+a+b"}


def test_a_folded_draft_is_made_from_the_latest_revision_only(db: Database) -> None:
    draft = Draft({"type": "alert.firing"}, "standard", (("alert", "k3_kl"),)).body()
    _record(db, _message("m", draft))
    _take_in(db)
    with db.read() as conn:
        (first,) = alarm_deliveries.unmade(conn)
    assert (first.message_id, first.source_id, first.text) == ("m", "m", draft)
    _record(db, _revision("r1", "m", draft.replace("firing", "firing+a")))
    _take_in(db)
    with db.write() as conn:  # made from the message's own draft after r1 was folded in: stale
        assert alarm_deliveries.make(conn, "m", "m", "made from m") is False
        (second,) = alarm_deliveries.unmade(conn)
        assert (second.source_id, "firing+a" in second.text) == ("r1", True)
        assert alarm_deliveries.make(conn, "m", "r1", "made from r1") is True
    assert _claim(db) == {"m": "made from r1"}


def test_recording_the_same_rows_twice_adds_nothing_and_delivery_never_writes_the_outbox(
    db: Database,
) -> None:
    rows = (_message("m", "opened"), _revision("r1", "m", "opened+a", fallback="esc"))
    _record(db, *rows)
    with db.read() as conn:
        before = [tuple(r) for r in conn.execute(sa.select(t.outbox).order_by(t.outbox.c.seq))]
    _take_in(db)
    _record(db, *rows)
    assert _take_in(db) == 0
    _finish(db, next(iter(_claim(db))), delivered=True)
    with db.read() as conn:
        after = [tuple(r) for r in conn.execute(sa.select(t.outbox).order_by(t.outbox.c.seq))]
    assert after == before and len(after) == 2


# -- any order: a reference of the rule, against the database ---------------------------------
@dataclass
class Reference:
    """What must become of each revision: folded while the message has not been claimed when it
    is taken in, else its fallback sent (or nothing)."""

    claimed: bool = False
    waiting: list[tuple[str, str, str | None]] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)
    body: str = "opened"
    fallbacks: dict[str, str] = field(default_factory=dict)
    nothing: list[str] = field(default_factory=list)

    def take_in(self) -> None:
        for rid, body, fallback in self.waiting:
            if not self.claimed:
                self.folded.append(rid)
                self.body = body
            elif fallback is not None:
                self.fallbacks[rid] = fallback
            else:
                self.nothing.append(rid)
        self.waiting = []


OPS = st.lists(
    st.sampled_from(["revise", "revise+fallback", "take_in", "claim", "fail", "hold"]), max_size=14
)
_ids = itertools.count()


@pytest.fixture(scope="module")
def shared_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(str(tmp_path_factory.mktemp("deliveries") / "any_order.duckdb"))
    migrate.upgrade(db)
    AlarmStore(db).add_receiver(Receiver("rcv", "p", "http://hook.example/x", "standard", None, 0))
    yield db
    db.dispose()


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_every_revision_is_folded_or_sent_once_in_any_order(
    shared_db: Database, ops: list[str]
) -> None:
    db, run = shared_db, f"e{next(_ids)}"
    message = f"{run}_m"
    ref = Reference()
    _record(db, _message(message, "opened"))
    sent: dict[str, list[str]] = {}

    held: list[str] = []  # leased, not answered yet: tried as far as a revision is concerned

    def claim(*, delivered: bool | None) -> None:
        for mid in held:
            _finish(db, mid, delivered=False)
        held.clear()
        for mid, body in _claim(db).items():
            if mid == message:
                ref.claimed = True
            sent.setdefault(mid, []).append(body)
            if delivered is None:
                held.append(mid)
            else:
                _finish(db, mid, delivered=delivered)

    for n, op in enumerate(ops):
        if op.startswith("revise"):
            rid = f"{run}_r{n}"
            fallback = f"escalated {n}" if op.endswith("fallback") else None
            ref.waiting.append((rid, f"opened+{n}", fallback))
            _record(db, _revision(rid, message, f"opened+{n}", fallback))
        elif op == "take_in":
            _take_in(db)
            ref.take_in()
        else:
            claim(delivered=None if op == "hold" else op == "claim")
    _take_in(db)  # the worker's last rounds: everything taken in and sent
    ref.take_in()
    claim(delivered=True)
    note(f"sent {json.dumps(sent)}")

    mine = {k: v for k, v in sent.items() if k.startswith(run)}
    # The message went out with the last revision folded before its first try, every try the
    # same body; each fallback went out under its revision's id; nothing else went out.
    assert set(mine[message]) == {ref.body}
    assert {k: set(v) for k, v in mine.items() if k != message} == {
        k: {v} for k, v in ref.fallbacks.items()
    }
    with db.read() as conn:
        rows = {
            r["message_id"]: r for r in alarm_deliveries.of(conn) if r["message_id"].startswith(run)
        }
    assert sorted(k for k, r in rows.items() if r["folded_into"] == message) == sorted(ref.folded)
    assert sorted(
        k for k, r in rows.items() if r["source_id"] is None and r["folded_into"] is None
    ) == sorted(ref.nothing)
