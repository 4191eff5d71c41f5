"""Runs whose recorded config names a batch-invariant or deterministic inference mode carry the
server's `mismatch.exact_parity` label, which the exact-parity rule pack selects on. The server
sets it whenever a config arrives; this gives it to runs stored before, from their stored
config, so their next steps are watched too.

The reading of a config is written out here, frozen, not imported from the server's domain code:
a revision replays the same change whatever later versions of that code say
(`server/domain/exact_parity.py` is the live reading).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_runs = sa.table("runs", sa.column("pk", sa.BigInteger), sa.column("labels"), sa.column("config"))
_KEY = "mismatch.exact_parity"
_SWITCHES = (
    "batch_invariant",
    "vllm_batch_invariant",
    "enable_batch_invariant",
    "enable_deterministic_inference",
    "sglang_enable_deterministic_inference",
    "deterministic_inference",
)
"""Leaf names (lower case) of a switch that turns an exact-parity mode on."""
_TARGETS = ("rl_on_policy_target", "sglang_rl_on_policy_target")
"""Leaf names (lower case) whose value names the trainer backend the engine matches exactly."""
_ON = frozenset({"true", "1", "yes", "on"})
_OFF = frozenset({"", "null", "none", "false", "0", "no", "off"})


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted key path → value text, as the server flattened configs at this revision."""
    out: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


def _label(config: Mapping[str, Any]) -> dict[str, str]:
    """`{_KEY: "leaf=value, …"}` for the exact-parity modes `config` records, else {}."""
    found: dict[str, str] = {}
    for key, value in _flatten(config).items():
        leaf = key.rsplit(".", 1)[-1].lower()
        text = value.strip().strip('"').strip().lower()
        on = (leaf in _SWITCHES and text in _ON) or (leaf in _TARGETS and text not in _OFF)
        if on and leaf not in found:
            found[leaf] = f"{leaf}={text}"
    return {_KEY: ", ".join(found.values())[:200]} if found else {}


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
        labelled = {**{k: v for k, v in labels.items() if k != _KEY}, **_label(config)}
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
