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
import re
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
_COUNTS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_moe_experts",
    "expert_model_parallel_size",
)
_PER_TOKEN = ("num_experts_per_tok", "moe_router_topk", "moe_topk")
_FAMILIES = ("moe", "mixtral", "deepseek_v2", "deepseek_v3", "dbrx", "gpt_oss")
_NAMED_BY = ("model_type", "architectures", "architecture")
_RELEASES = re.compile(
    r"moe|mixtral|deepseek-v[23]|deepseek-r1|gpt-oss|kimi-k2|glm-4\.[56]|qwen3-next"
    r"|\d+x\d+b|-a\d+(\.\d+)?b(\b|_|-)"
)
_REPLAY = (
    "routing_replay",
    "router_replay",
    "enable_routing_replay",
    "use_routing_replay",
    "moe_routing_replay",
    "r3",
)
_ON = {"true", "1", "yes", "on"}
_OFF = {"", "null", "none", "false", "0", "no", "off", "disabled", "disable"}


def _leaves(config: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """(key path, leaf, value text), lower case, as the server read configs at this revision."""
    out: list[tuple[str, str, str]] = []
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.extend(_leaves(value, path + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        leaf = path.rsplit(".", 1)[-1].lower()
        out.append((path.lower(), leaf, text.strip().strip('"').strip().lower()))
    return out


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _moe(key: str, leaf: str, text: str) -> bool:
    if leaf in _COUNTS:
        return _number(text) > 1
    if leaf in _PER_TOKEN:
        return _number(text) > 0
    if leaf in _NAMED_BY:
        return any(f in text for f in _FAMILIES)
    if "reward" in key or "judge" in key:
        return False
    if "model" in leaf or leaf == "pretrain" or (leaf in ("path", "name") and "model" in key):
        return _RELEASES.search(text) is not None and "distill" not in text
    return False


def _replay(key: str, leaf: str, text: str) -> bool:
    if leaf in _REPLAY:
        return text in _ON
    in_replay = "router_replay" in key or "routing_replay" in key
    return in_replay and leaf in ("mode", "enable", "enabled") and text not in _OFF


def _label(config: Mapping[str, Any]) -> str | None:
    found: dict[str, str] = {}
    replay = False
    for key, leaf, text in _leaves(config):
        if _moe(key, leaf, text):
            found.setdefault(leaf, f"{leaf}={text}")
        replay = replay or _replay(key, leaf, text)
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
