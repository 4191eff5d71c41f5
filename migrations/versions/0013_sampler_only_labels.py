"""Runs whose recorded config names a sampler-only setting (a repetition penalty, top-k, top-p,
min-p, a temperature beside raw logprobs) carry the server's `mismatch.sampler_only` label, which
the sampler-only rule pack selects on. The server sets it whenever a config arrives; this gives
it to runs stored before, from their stored config, so their next steps are watched too.

The reading of a config is written out here, frozen, not imported from the server's domain code:
a revision replays the same change whatever later versions of that code say
(`server/domain/sampler.py` is the live reading).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_runs = sa.table("runs", sa.column("pk", sa.BigInteger), sa.column("labels"), sa.column("config"))
_KEY = "mismatch.sampler_only"
_MAX_LABEL = 200
_SKIPPED = ("val_", "eval", "validation", "test")  # path components of a validation block


def _not(neutral: float) -> Callable[[float], bool]:
    return lambda value: value != neutral


# leaf name → whether a value is active (top_k ≤ 0 and top_p ≥ 1 mean off)
_ACTIVE: dict[str, Callable[[float], bool]] = {
    "repetition_penalty": _not(1.0),
    "presence_penalty": _not(0.0),
    "frequency_penalty": _not(0.0),
    "top_k": lambda value: value > 0,
    "top_p": lambda value: 0 < value < 1,
    "min_p": lambda value: value > 0,
}


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


def _skipped(path: str) -> bool:
    parts = [part.lower() for part in path.split(".")[:-1]]
    return any(part == "val" or part.startswith(_SKIPPED) for part in parts)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip('"'))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _active(leaf: str, text: str, *, raw: bool) -> bool | None:
    """Whether a setting makes the rollout sample from another distribution than the trainer
    scores; a temperature counts only beside raw logprobs."""
    judge = _ACTIVE.get(leaf)
    if judge is None and not (leaf == "temperature" and raw):
        return None
    value = _number(text)
    if value is None:
        return None
    return value != 1 if judge is None else judge(value)


def _label(config: Mapping[str, Any]) -> dict[str, str]:
    """`{_KEY: "leaf=value, …"}` for the sampler-only settings `config` records, else {}."""
    flat = {k: v for k, v in _flatten(config).items() if not _skipped(k)}
    raw = any(
        k.rsplit(".", 1)[-1] == "logprobs_mode" and "raw" in v.lower() for k, v in flat.items()
    )
    found: dict[str, str] = {}
    for key, text in flat.items():
        leaf = key.rsplit(".", 1)[-1]
        if leaf not in found and _active(leaf, text, raw=raw):
            found[leaf] = f"{leaf}={text}"
    if not found:
        return {}
    text = ", ".join(found.values())
    if len(text) > _MAX_LABEL:
        text = text[: _MAX_LABEL - 1] + "…"
    return {_KEY: text}


def _without(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != _KEY}


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
        labelled = {**_without(labels), **_label(config)}
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
            kept = _without(labels)
            conn.execute(sa.update(_runs).where(_runs.c.pk == pk).values(labels=json.dumps(kept)))
