"""Values as the wire carries them: metric values as floats (NaN for what cannot be read),
non-finite ones as strings so the body stays strict JSON; and where the spool lives."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def spool_dir_default() -> Path:
    configured = os.environ.get("MISMATCH_SPOOL_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mismatch-monitor" / "spool"


def to_float(value: Any) -> float:
    """A metric value as float, tolerating tensors and numpy scalars; NaN when unreadable."""
    try:
        if hasattr(value, "item"):
            value = value.item()
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def wire(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)  # "nan", "inf", "-inf": strict JSON


def wire_exemplar(exemplar: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(exemplar)
    for key in ("rollout_logprob", "trainer_logprob"):
        out[key] = wire(to_float(out[key]))
    return out


def step_inputs(
    step: int, rollout: Any, trainer: Any, metrics: Mapping[str, Any] | None
) -> tuple[Any, Mapping[str, Any] | None, str]:
    """`log_step`'s arguments as meant: a mapping in the rollout position with no trainer
    logprobs is metrics (`log_step(step, {"k3_kl": ...})`, the form people type); logprobs of
    one side only compute nothing, which the third item says in words ("" when all is well)."""
    if isinstance(rollout, Mapping) and trainer is None:
        return None, {**rollout, **(metrics or {})}, ""
    if (rollout is None) != (trainer is None):
        given = "rollout" if trainer is None else "trainer"
        return (
            rollout,
            metrics,
            f"log_step(step={step}) got {given} logprobs only: the mismatch needs both "
            "(log_step(step, rollout_logprobs, trainer_logprobs)); nothing was computed from them",
        )
    return rollout, metrics, ""
