"""The delivery worker's record: what goes out under each outbox row's id, and how its attempts
went. Delivery reads the outbox (`alarm_outbox`, written by recording and never changed) and
writes only here, so the alarm path runs one way: recording → outbox → delivery.

A round of the worker:
1. `take_in` gives every new outbox row its delivery row. A message goes out with its own body.
   A revision of a message that has not been tried yet is folded into it (the message goes out
   with the revision's body instead); if the message has been tried, or never reached this
   receiver, the revision's fallback goes out under the revision's id, or nothing does.
   Revisions are taken in the order recording wrote them, so the latest one is what goes out.
2. `unmade` / `make`: a draft's body is made (the diagnosis it owes) before it can be claimed.
3. `claim_due` leases due messages, so replicas never send one twice at once; `finish` records
   what an attempt left.

Taking in runs one replica at a time (`db.hold_task`). A claim and a fold race on the message's
row only, and both re-check it as they write (`_waiting`, `_due`): a revision is folded into a
message or its fallback is sent, never neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.storage.alarms.outbox import DRAFT_PREFIX, is_draft
from server.storage.db import hold_task
from server.storage.schema import alarm_tables as t

_d = t.deliveries.c
_o = t.outbox.c


@dataclass(frozen=True)
class Unmade:
    """A delivery whose text is a draft: `text` is the draft, from outbox row `source_id`."""

    message_id: str
    source_id: str
    text: str


@dataclass(frozen=True)
class Claimed:
    """A message leased to this worker: its body, and its receiver's url and secret (None: the
    receiver is gone)."""

    message_id: str
    body: str
    attempts: int
    created_at: float
    url: str | None
    secret: str | None


_GONE = (None, None)  # a deleted receiver's url and secret
_open = sa.and_(_d.delivered_at.is_(None), _d.gave_up_at.is_(None), _d.source_id.is_not(None))
_waiting = sa.and_(_open, _d.attempts == 0, _d.lease_until.is_(None))


def _due(now: float) -> sa.ColumnElement[bool]:
    return sa.and_(
        _open,
        _d.body.is_not(None),
        _d.next_attempt_at <= now,
        sa.or_(_d.lease_until.is_(None), _d.lease_until < now),
        ~_earlier_open(),
    )


def _earlier_open() -> sa.ColumnElement[bool]:
    """An earlier message of the same thread (incident) to the same receiver is still on its
    way: this one waits for it, so a receiver never hears a resolve before its firing."""
    earlier = t.deliveries.alias("earlier")
    e = earlier.c
    return (
        sa.select(e.message_id)
        .where(
            e.thread == _d.thread,
            e.receiver_id == _d.receiver_id,
            e.seq < _d.seq,
            e.delivered_at.is_(None),
            e.gave_up_at.is_(None),
            e.source_id.is_not(None),
        )
        .exists()
    )


def _new() -> sa.ColumnElement[bool]:
    """An outbox row with no delivery row yet."""
    mine = t.deliveries.alias("mine")
    return ~sa.select(mine.c.message_id).where(mine.c.message_id == _o.id).exists()


def any_new(conn: Connection) -> bool:
    """Whether the outbox holds a row not taken in (a read, no write lock)."""
    return conn.execute(sa.select(_o.id).where(_new()).limit(1)).first() is not None


def take_in(conn: Connection) -> int:
    """Give every outbox row without one its delivery row; returns how many it took in."""
    hold_task(conn, "alarm-intake")
    new = _new()
    made = sa.case((_o.body.startswith(DRAFT_PREFIX, autoescape=True), None), else_=_o.body)
    messages = sa.select(
        _o.id,
        _o.receiver_id,
        _o.id,
        made,
        _o.created_at,
        sa.literal(0),
        _o.not_before,
        _o.thread,
        _o.seq,
    ).where(_o.revises.is_(None), new)
    columns = ["message_id", "receiver_id", "source_id", "body", "created_at", "attempts"]
    columns += ["next_attempt_at", "thread", "seq"]
    insert = pg_insert(t.deliveries).from_select(columns, messages)
    returned = insert.on_conflict_do_nothing().returning(_d.message_id)
    taken = len(conn.execute(returned).all())
    revised, target = t.outbox.alias("revised"), t.deliveries.alias("target")
    revisions = conn.execute(
        sa.select(t.outbox, revised.c.id.label("revised_id"), target.c.message_id.label("taken"))
        .select_from(
            t.outbox.outerjoin(revised, revised.c.id == _o.revises).outerjoin(
                target, target.c.message_id == _o.revises
            )
        )
        .where(_o.revises.is_not(None), new)
        .order_by(_o.seq)
    ).all()
    for row in revisions:
        if row.revised_id is not None and row.taken is None:
            continue  # its message was recorded since this round began: the next round
        _take_revision(conn, row)
        taken += 1
    return taken


def _take_revision(conn: Connection, row: Any) -> None:
    folded = conn.execute(
        sa.update(t.deliveries)
        .where(_d.message_id == row.revises, _waiting)
        .values(source_id=row.id, body=None if is_draft(row.body) else row.body)
    ).rowcount
    values: dict[str, Any] = {
        "message_id": row.id,
        "receiver_id": row.receiver_id,
        "created_at": row.created_at,
        "attempts": 0,
        "next_attempt_at": row.created_at,
        "thread": row.thread,
        "seq": row.seq,
    }
    if folded:
        values.update(folded_into=row.revises)
    elif row.fallback is not None:  # the message was tried already: the fallback goes out
        values.update(source_id=row.id, body=None if is_draft(row.fallback) else row.fallback)
    conn.execute(pg_insert(t.deliveries).values(**values).on_conflict_do_nothing())


def unmade(conn: Connection, limit: int = 50) -> list[Unmade]:
    """Deliveries whose text is a draft still to be made, oldest first."""
    source = t.outbox
    own_fallback = sa.and_(source.c.revises.is_not(None), source.c.id == _d.message_id)
    text = sa.case((own_fallback, source.c.fallback), else_=source.c.body)
    rows = conn.execute(
        sa.select(_d.message_id, _d.source_id, text.label("text"))
        .select_from(t.deliveries.join(source, source.c.id == _d.source_id))
        .where(_open, _d.body.is_(None))
        .order_by(_d.created_at, _d.message_id)
        .limit(limit)
    ).all()
    return [Unmade(r.message_id, r.source_id, r.text) for r in rows]


def make(conn: Connection, message_id: str, source_id: str, body: str) -> bool:
    """The body made from `source_id`'s draft, unless a later revision was folded in meanwhile
    (that one is made next)."""
    done = conn.execute(
        sa.update(t.deliveries)
        .where(_d.message_id == message_id, _d.source_id == source_id, _d.body.is_(None))
        .values(body=body)
    )
    return bool(done.rowcount)


def any_due(conn: Connection, now: float) -> bool:
    """A cheap look (a read, no write lock) before claiming."""
    return conn.execute(sa.select(_d.message_id).where(_due(now)).limit(1)).first() is not None


def claim_due(conn: Connection, now: float, *, lease_s: float, limit: int = 50) -> list[Claimed]:
    """Due messages leased to the caller for `lease_s`, oldest first. What is leased is read
    back from the rows as written, so a revision folded in just before goes out with it."""
    due = sa.select(_d.message_id).where(_due(now)).order_by(_d.created_at, _d.seq).limit(limit)
    leased = conn.execute(
        sa.update(t.deliveries)
        .where(_d.message_id.in_(due.scalar_subquery()), _due(now))
        .values(lease_until=now + lease_s)
        .returning(_d.message_id, _d.receiver_id, _d.body, _d.attempts, _d.created_at, _d.seq)
    ).all()
    if not leased:
        return []
    found = conn.execute(
        sa.select(t.receivers.c.id, t.receivers.c.url, t.receivers.c.secret).where(
            t.receivers.c.id.in_({r.receiver_id for r in leased})
        )
    )
    receivers = {r.id: (r.url, r.secret) for r in found}
    order = {r.message_id: (r.created_at, r.seq if r.seq is not None else 0) for r in leased}
    claimed = [
        Claimed(
            r.message_id, r.body, r.attempts, r.created_at, *receivers.get(r.receiver_id, _GONE)
        )
        for r in leased
    ]
    return sorted(claimed, key=lambda c: (*order[c.message_id], c.message_id))


def finish(conn: Connection, message_id: str, changes: Mapping[str, Any]) -> None:
    """What an attempt left: attempts, status, error, delivered or given up, next attempt."""
    conn.execute(sa.update(t.deliveries).where(_d.message_id == message_id).values(**changes))


def of(conn: Connection, message_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Delivery rows as stored (all of them when `message_ids` is None), for inspection."""
    query = sa.select(t.deliveries).order_by(_d.created_at, _d.message_id)
    if message_ids is not None:
        query = query.where(_d.message_id.in_(list(message_ids)))
    return [dict(row._mapping) for row in conn.execute(query)]
