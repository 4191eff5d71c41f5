"""MoE runs are judged at MoE levels: runs whose recorded config names a mixture-of-experts
model carry the server's `mismatch.moe` label (the server sets it whenever a config arrives;
this gives it to runs stored before), and the dense vllm-kl ceilings every project received
("vllm-kl high", "vllm-kl far beyond", still without a label filter) leave those runs
(`!mismatch.moe`), which the MoE pack watches at their own levels once the project receives it.

The reading of a config is written out here as it was when this revision was made, not imported
from the server's domain code: a revision replays the same change whatever later versions of
that code say (`server/domain/moe.py` is the live reading).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_runs = sa.table("runs", sa.column("pk", sa.BigInteger), sa.column("labels"), sa.column("config"))
_rules = sa.table("alarm_rules", sa.column("name"), sa.column("label"))
_KEY = "mismatch.moe"
_NOT_MOE = "!mismatch.moe"
_DENSE_CEILINGS = ("vllm-kl high", "vllm-kl far beyond")
_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_PER_TOKEN = ("num_experts_per_tok", "moe_router_topk", "moe_topk")
_FAMILIES = ("moe", "mixtral", "deepseek_v2", "deepseek_v3", "dbrx", "gpt_oss")
_NAMED_BY = ("model_type", "architectures", "architecture")
_REPLAY = (
    "routing_replay",
    "router_replay",
    "enable_routing_replay",
    "use_routing_replay",
    "moe_routing_replay",
    "r3",
)


def _leaves(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out.extend(_leaves(value))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out.append((str(key).lower(), text.strip().strip('"').strip().lower()))
    return out


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _label(config: Mapping[str, Any]) -> str | None:
    found: dict[str, str] = {}
    replay = False
    for leaf, text in _leaves(config):
        moe = (
            (leaf in _COUNTS and _number(text) > 1)
            or (leaf in _PER_TOKEN and _number(text) > 0)
            or (leaf in _NAMED_BY and any(f in text for f in _FAMILIES))
        )
        if moe:
            found.setdefault(leaf, f"{leaf}={text}")
        replay = replay or (leaf in _REPLAY and text in {"true", "1", "yes", "on"})
    if not found:
        return None
    return ", ".join([*found.values(), *(["routing_replay=on"] if replay else [])])[:200]


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
        label = _label(config)
        labelled = {k: v for k, v in labels.items() if k != _KEY}
        if label is not None:
            labelled[_KEY] = label
        if labelled != labels:
            conn.execute(
                sa.update(_runs).where(_runs.c.pk == pk).values(labels=json.dumps(labelled))
            )
    conn.execute(
        sa.update(_rules)
        .where(_rules.c.name.in_(_DENSE_CEILINGS), _rules.c.label.is_(None))
        .values(label=_NOT_MOE)
    )


def downgrade() -> None:
    conn = op.get_bind()
    conn.execute(
        sa.update(_rules)
        .where(_rules.c.name.in_(_DENSE_CEILINGS), _rules.c.label == _NOT_MOE)
        .values(label=None)
    )
    rows = conn.execute(sa.select(_runs.c.pk, _runs.c.labels)).all()
    for pk, labels_text in rows:
        try:
            labels = json.loads(labels_text or "{}")
        except ValueError:
            continue  # as in `upgrade`: left as it is
        if isinstance(labels, dict) and _KEY in labels:
            kept = {k: v for k, v in labels.items() if k != _KEY}
            conn.execute(sa.update(_runs).where(_runs.c.pk == pk).values(labels=json.dumps(kept)))
