"""Messages of one incident reach each receiver in the order recording wrote them: outbox rows
and their deliveries name their incident (`thread`), and a delivery keeps its outbox row's
`seq`, so a message is not sent while an earlier one of its thread to the same receiver is
still on its way (never a resolve before its firing). Rows written before carry no thread and
keep going out as they did.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("alarm_outbox", sa.Column("thread", sa.String(200), nullable=True))
    op.add_column("alarm_deliveries", sa.Column("thread", sa.String(200), nullable=True))
    op.add_column("alarm_deliveries", sa.Column("seq", sa.BigInteger, nullable=True))
    op.execute(
        "UPDATE alarm_deliveries SET seq = o.seq FROM alarm_outbox AS o "
        "WHERE o.id = alarm_deliveries.message_id"
    )


def downgrade() -> None:
    op.drop_column("alarm_deliveries", "seq")
    op.drop_column("alarm_deliveries", "thread")
    op.drop_column("alarm_outbox", "thread")
