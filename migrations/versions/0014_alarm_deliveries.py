"""The delivery worker keeps its own record (`alarm_deliveries`), and the outbox becomes what
recording wrote, never changed afterwards: delivery no longer replaces a draft's body, leases or
marks the outbox's rows. A follow-up joining an incident's first message is now a row of its
own (`revises`, with the escalation to send instead as `fallback`), which delivery folds in or
sends; `seq` numbers the rows in the order recording wrote them.

Existing rows keep their state: each gets a delivery row with its attempts, lease, outcome and
body (a draft's body is made again by the worker). The outbox is small (messages waiting, and
those sent), so it is read whole and written again in its new shape: DuckDB cannot add a
constraint to a table changed in the same transaction.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

F = sa.Float(53)
DRAFT_PREFIX = '{"draft": '
STATE = ("attempts", "lease_until", "delivered_at", "gave_up_at", "last_status", "last_error")
_SEQ = sa.Sequence("alarm_outbox_seq")


def _state_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", F, nullable=False),
        sa.Column("lease_until", F, nullable=True),
        sa.Column("delivered_at", F, nullable=True),
        sa.Column("gave_up_at", F, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    ]


def _message_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("receiver_id", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", F, nullable=False),
    ]


def upgrade() -> None:
    conn = op.get_bind()
    old = sa.table("alarm_outbox", *(sa.column(c.name) for c in _message_columns()))
    old.append_column(sa.column("next_attempt_at"))
    for name in STATE:
        old.append_column(sa.column(name))
    rows = [dict(r._mapping) for r in conn.execute(sa.select(old).order_by("created_at", "id"))]
    op.drop_table("alarm_outbox")
    op.execute(sa.schema.CreateSequence(_SEQ))
    outbox = op.create_table(
        "alarm_outbox",
        *_message_columns(),
        sa.Column("seq", sa.BigInteger, _SEQ, server_default=_SEQ.next_value(), nullable=False),
        sa.Column("not_before", F, nullable=False),
        sa.Column("revises", sa.String(200), nullable=True),
        sa.Column("fallback", sa.Text, nullable=True),
    )
    deliveries = op.create_table(
        "alarm_deliveries",
        sa.Column("message_id", sa.String(200), primary_key=True),
        sa.Column("receiver_id", sa.String(64), nullable=False),
        sa.Column("source_id", sa.String(200), nullable=True),
        sa.Column("body", sa.Text, nullable=True),
        sa.Column("created_at", F, nullable=False),
        *_state_columns(),
        sa.Column("folded_into", sa.String(200), nullable=True),
    )
    assert outbox is not None and deliveries is not None
    for row in rows:  # one at a time: `seq` follows the order they were written in
        conn.execute(
            sa.insert(outbox).values(
                id=row["id"],
                receiver_id=row["receiver_id"],
                body=row["body"],
                created_at=row["created_at"],
                not_before=row["next_attempt_at"],
            )
        )
    for row in rows:
        state = {name: row[name] for name in (*STATE, "next_attempt_at", "created_at")}
        made = None if row["body"].startswith(DRAFT_PREFIX) else row["body"]
        conn.execute(
            sa.insert(deliveries).values(
                message_id=row["id"],
                receiver_id=row["receiver_id"],
                source_id=row["id"],
                body=made,
                **state,
            )
        )


def downgrade() -> None:
    """Back to delivery state on the outbox rows. A revision taken in as a fallback becomes the
    message it sent; one folded in, or with nothing to send, is dropped (its message carries
    it); one not taken in yet is applied as the earlier code applied it when recording."""
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT o.*, d.source_id AS d_source_id, d.body AS d_body, "
            "d.next_attempt_at AS d_next_attempt_at, "
            + ", ".join(f"d.{n} AS d_{n}" for n in STATE)
            + " FROM alarm_outbox o LEFT JOIN alarm_deliveries d ON d.message_id = o.id"
            " ORDER BY o.seq"
        )
    ).all()
    messages = _messages_before(rows)
    op.drop_table("alarm_deliveries")
    op.drop_table("alarm_outbox")
    op.execute(sa.schema.DropSequence(_SEQ))
    outbox = op.create_table("alarm_outbox", *_message_columns(), *_state_columns())
    assert outbox is not None
    for message in messages:
        conn.execute(sa.insert(outbox).values(**message))


def _messages_before(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The outbox rows in 0013's shape: each with its delivery state and the body it sends."""
    by_id = {r.id: r for r in rows}
    messages: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.revises is None or r.d_source_id == r.id:
            messages[r.id] = _before(r, by_id)
    for r in rows:  # revisions never taken in: folded if their message waits, else sent
        if r.revises is None or r.d_attempts is not None:
            continue
        target = messages.get(r.revises)
        if target is not None and target["attempts"] == 0 and target["lease_until"] is None:
            target["body"] = r.body
        elif r.fallback is not None:
            messages[r.id] = {**_before(r, by_id), "body": r.fallback}
    return list(messages.values())


def _before(r: Any, by_id: dict[str, Any]) -> dict[str, Any]:
    body = r.d_body
    if body is None:  # a draft not made yet: the text of the row it comes from
        source = by_id.get(r.d_source_id or r.id, r)
        own_fallback = source.revises is not None and source.id == r.id
        body = source.fallback if own_fallback else source.body
    state = {name: getattr(r, f"d_{name}") for name in STATE}
    return {
        "id": r.id,
        "receiver_id": r.receiver_id,
        "body": body,
        "created_at": r.created_at,
        **state,
        "attempts": state["attempts"] or 0,
        "next_attempt_at": r.not_before if r.d_next_attempt_at is None else r.d_next_attempt_at,
    }
