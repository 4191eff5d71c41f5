"""The alarm outbox: webhook bodies waiting for their receivers, written in the transaction that
records the alerts they tell of, and drained by the delivery worker.

A message that owes a diagnosis is written as a draft (`Draft`: the event, the receiver's format
and the alerts to diagnose); the delivery worker's thread makes the diagnosis and writes the body
(`prepare`), so the ingest path never reads what a diagnosis needs. Drafts are never claimed for
delivery. A message is claimed with a lease, so replicas never send it twice at once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, RowMapping

from server.storage import alarm_tables as t

DRAFT_PREFIX = '{"draft": '
_o = t.outbox.c


@dataclass(frozen=True)
class OutboxMessage:
    """One webhook body for one receiver, as the outbox keeps it until delivered."""

    id: str
    receiver_id: str
    body: str
    created_at: float
    attempts: int = 0
    next_attempt_at: float = 0.0
    lease_until: float | None = None
    delivered_at: float | None = None
    gave_up_at: float | None = None
    last_status: int | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class Fold:
    """A follow-up folded into a message still waiting to go out (its body replaced), or, when
    that message has left already, `fallback` sent instead (None: nothing)."""

    message_id: str
    body: str
    fallback: OutboxMessage | None = None


@dataclass(frozen=True)
class Draft:
    """A body still to be made: the event, the receiver's format, and (alert id, metric) pairs
    whose first diagnosis that can be made goes into it."""

    event: dict[str, Any]
    format: str
    diagnose: tuple[tuple[str, str], ...]

    def body(self) -> str:
        found = {"event": self.event, "format": self.format, "diagnose": self.diagnose}
        return json.dumps({"draft": found})


def parse_draft(body: str) -> Draft | None:
    if not body.startswith(DRAFT_PREFIX):
        return None
    found = json.loads(body)["draft"]
    pairs = tuple((str(a), str(m)) for a, m in found["diagnose"])
    return Draft(found["event"], str(found["format"]), pairs)


_waiting = sa.and_(
    _o.attempts == 0, _o.lease_until.is_(None), _o.delivered_at.is_(None), _o.gave_up_at.is_(None)
)


def record(conn: Connection, messages: Sequence[OutboxMessage], folds: Sequence[Fold] = ()) -> None:
    """New messages (one whose id is stored already is left as it is) and folds: the bodies of
    messages not tried yet replaced, the fallbacks of those already gone written."""
    for fold in folds:
        updated = conn.execute(
            sa.update(t.outbox).where(_o.id == fold.message_id, _waiting).values(body=fold.body)
        ).rowcount
        if not updated and fold.fallback is not None:
            messages = [*messages, fold.fallback]
    for message in messages:
        conn.execute(
            pg_insert(t.outbox)
            .values(**dataclasses.asdict(message))
            .on_conflict_do_nothing(index_elements=["id"])
        )


def drafts(conn: Connection, limit: int = 50) -> list[tuple[str, str]]:
    """(id, body) of drafts not yet made into bodies, oldest first."""
    query = (
        sa.select(_o.id, _o.body)
        .where(_waiting, _o.body.startswith(DRAFT_PREFIX, autoescape=True))
        .order_by(_o.created_at)
        .limit(limit)
    )
    return [(row.id, row.body) for row in conn.execute(query)]


def prepare(conn: Connection, message_id: str, draft: str, body: str) -> bool:
    """Replace a draft by its body, unless it changed meanwhile (a follow-up folded into it:
    that draft is made next time)."""
    done = conn.execute(
        sa.update(t.outbox).where(_o.id == message_id, _o.body == draft).values(body=body)
    )
    return bool(done.rowcount)


def _due(now: float) -> sa.ColumnElement[bool]:
    return sa.and_(
        _o.delivered_at.is_(None),
        _o.gave_up_at.is_(None),
        _o.next_attempt_at <= now,
        sa.or_(_o.lease_until.is_(None), _o.lease_until < now),
        sa.not_(_o.body.startswith(DRAFT_PREFIX, autoescape=True)),
    )


def any_due(conn: Connection, now: float) -> bool:
    """A cheap look (a read, no write lock) before claiming."""
    return conn.execute(sa.select(_o.id).where(_due(now)).limit(1)).first() is not None


def claim_due(conn: Connection, now: float, *, lease_s: float, limit: int = 50) -> list[RowMapping]:
    """Due messages with their receiver's url and secret (None: the receiver is gone), leased
    to the caller for `lease_s`."""
    rows = conn.execute(
        sa.select(t.outbox, t.receivers.c.url, t.receivers.c.secret)
        .select_from(t.outbox.join(t.receivers, t.receivers.c.id == _o.receiver_id, isouter=True))
        .where(_due(now))
        .order_by(_o.created_at)
        .limit(limit)
    ).all()
    if rows:
        conn.execute(
            sa.update(t.outbox)
            .where(_o.id.in_([r.id for r in rows]))
            .values(lease_until=now + lease_s)
        )
    return [row._mapping for row in rows]


def finish(conn: Connection, message_id: str, changes: Mapping[str, Any]) -> None:
    """What an attempt left: attempts, status, error, delivered or given up, next attempt."""
    conn.execute(sa.update(t.outbox).where(_o.id == message_id).values(**changes))
