"""Runs whose recorded config names a batch-invariant or deterministic inference mode carry the
server's `mismatch.exact_parity` label, which the exact-parity rule pack selects on. The server
sets it whenever a config arrives; this gives it to runs stored before, from their stored
config, so their next steps are watched too.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from server.domain import exact_parity

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_runs = sa.table("runs", sa.column("pk", sa.BigInteger), sa.column("labels"), sa.column("config"))
_KEY = exact_parity.EXACT_PARITY_LABEL


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_runs.c.pk, _runs.c.labels, _runs.c.config)).all()
    for pk, labels_text, config_text in rows:
        try:
            labels, config = json.loads(labels_text or "{}"), json.loads(config_text or "{}")
        except ValueError:
            continue  # a document this version cannot read: left as it is
        if not isinstance(labels, dict) or not isinstance(config, dict):
            continue
        derived = exact_parity.derived_labels(config)
        labelled = {**{k: v for k, v in labels.items() if k != _KEY}, **derived}
        if labelled != labels:
            conn.execute(
                sa.update(_runs).where(_runs.c.pk == pk).values(labels=json.dumps(labelled))
            )


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_runs.c.pk, _runs.c.labels)).all()
    for pk, labels_text in rows:
        try:
            labels = json.loads(labels_text or "{}")
        except ValueError:
            continue  # as in `upgrade`: left as it is
        if isinstance(labels, dict) and _KEY in labels:
            kept = {k: v for k, v in labels.items() if k != _KEY}
            conn.execute(sa.update(_runs).where(_runs.c.pk == pk).values(labels=json.dumps(kept)))
