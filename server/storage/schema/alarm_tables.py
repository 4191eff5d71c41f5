"""Alarm tables (migration 0002 builds them): rules, receivers, silences, states, alerts, outbox;
which projects received the default pack (0008); and the delivery worker's record (0014)."""

from __future__ import annotations

import sqlalchemy as sa

from server.storage.schema.tables import metadata

F = sa.Float(53)

rules = sa.Table(
    "alarm_rules",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("run_id", sa.String(128), nullable=True),
    sa.Column("label", sa.String(300), nullable=True),
    sa.Column("gpu", sa.String(200), nullable=True),
    sa.Column("severity", sa.String(16), nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("updated_at", F, nullable=False),
)
project_packs = sa.Table(
    "project_packs",
    metadata,
    sa.Column("project", sa.String(128), primary_key=True),
    sa.Column("pack", sa.String(32), primary_key=True),
    sa.Column("received_at", F, nullable=False),
)
receivers = sa.Table(
    "alarm_receivers",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("format", sa.String(16), nullable=False),
    sa.Column("secret", sa.Text, nullable=True),
    sa.Column("created_at", F, nullable=False),
)
silences = sa.Table(
    "alarm_silences",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("rule_id", sa.String(64), nullable=True),
    sa.Column("run_id", sa.String(128), nullable=True),
    sa.Column("label", sa.String(300), nullable=True),
    sa.Column("until", F, nullable=False),
    sa.Column("comment", sa.Text, nullable=False),
    sa.Column("created_at", F, nullable=False),
)
states = sa.Table(
    "alarm_states",
    metadata,
    sa.Column("rule_id", sa.String(64), primary_key=True),
    sa.Column("series", sa.String(600), primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("updated_at", F, nullable=False),
)
alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("rule_id", sa.String(64), nullable=False),
    sa.Column("rule_name", sa.String(200), nullable=False),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("run_id", sa.String(128), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("actor", sa.String(128), nullable=True),
    sa.Column("severity", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", F, nullable=False),
    sa.Column("threshold", F, nullable=True),
    sa.Column("started_at", F, nullable=False),
    sa.Column("resolved_at", F, nullable=True),
    sa.Column("resolved_step", sa.BigInteger, nullable=True),
    sa.Column("linked_alert_id", sa.String(64), nullable=True),
    sa.Column("silenced", sa.Boolean, nullable=False),
    sa.Column("incident_id", sa.String(64), nullable=True),  # migration 0006
)
outbox_seq = sa.Sequence("alarm_outbox_seq", metadata=metadata)  # migration 0014
outbox = sa.Table(
    # What recording tells receivers, written once and never changed (migration 0014): a message,
    # or a revision of one (`revises`): its body replaces the message's if that has not been
    # tried yet, else its `fallback` (if any) goes out on its own. Delivery decides which, and
    # keeps what it decided in its own table.
    "alarm_outbox",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column(
        "seq", sa.BigInteger, outbox_seq, server_default=outbox_seq.next_value(), nullable=False
    ),
    sa.Column("receiver_id", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", F, nullable=False),
    sa.Column("not_before", F, nullable=False),
    sa.Column("revises", sa.String(200), nullable=True),
    sa.Column("fallback", sa.Text, nullable=True),
    sa.Column("thread", sa.String(200), nullable=True),  # its incident: one order (0015)
)
deliveries = sa.Table(
    # The delivery worker's own record of each outbox row (migration 0014): what goes out under
    # the row's id (`source_id`: the outbox row whose text it is; `body`: that text made, NULL
    # while a draft waits for its diagnosis), its lease and attempts; or, for a revision, the
    # message it was folded into.
    "alarm_deliveries",
    metadata,
    sa.Column("message_id", sa.String(200), primary_key=True),
    sa.Column("receiver_id", sa.String(64), nullable=False),
    sa.Column("source_id", sa.String(200), nullable=True),
    sa.Column("body", sa.Text, nullable=True),
    sa.Column("created_at", F, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", F, nullable=False),
    sa.Column("lease_until", F, nullable=True),
    sa.Column("delivered_at", F, nullable=True),
    sa.Column("gave_up_at", F, nullable=True),
    sa.Column("folded_into", sa.String(200), nullable=True),
    sa.Column("last_status", sa.Integer, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("thread", sa.String(200), nullable=True),  # its outbox row's (0015)
    sa.Column("seq", sa.BigInteger, nullable=True),  # its outbox row's: the order of a thread
)
