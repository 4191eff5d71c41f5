"""Whole next-token distributions, engine against trainer, at each sampled position: the
sampled token's logprob says how far apart the two are on one token; the full vocabulary says
how far apart the two distributions are — KL(engine ‖ trainer) and the total variation, the
largest difference in probability either assigns to any set of tokens.

Both sides come as log-probabilities over the vocabulary, -inf where a side gives a token no
mass (a top-p or top-k cut it). A token the engine can sample and the trainer gives no mass
makes the KL infinite: that is what it is, and it is reported so; the total variation stays
finite. Pure NumPy (imported when called, as the rest of the check does); no engine here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NAMES = (
    "full_kl_mean",
    "full_kl_max",
    "full_tv_mean",
    "full_tv_max",
    "full_kl_finite_mean",
    "full_support_mismatch_rate",
)
"""What a phase reports: token mean and max over the sampled positions, and, since one position
where the supports differ makes the mean infinite, the mean over the positions where both
support the same tokens and the share of positions where they do not (the engine's top-p or
top-k kept a token the trainer's cut)."""


def dense(logprobs: Mapping[int, float], vocab: int) -> Any:
    """A position's {token id: logprob} as a vector over the vocabulary (-inf elsewhere)."""
    import numpy as np

    out = np.full(vocab, -np.inf)
    for token, value in logprobs.items():
        if 0 <= token < vocab:
            out[token] = value
    return out


def position(engine: Any, trainer: Any) -> tuple[float, float]:
    """(KL(engine ‖ trainer), total variation) at one position, in float64."""
    import numpy as np

    le, lt = np.asarray(engine, np.float64), np.asarray(trainer, np.float64)
    pe, pt = np.exp(le), np.exp(lt)
    tv = 0.5 * float(np.abs(pe - pt).sum())
    held = pe > 0
    if np.any(held & ~(pt > 0)):
        return float("inf"), tv
    kl = float(np.sum(pe[held] * (le[held] - lt[held])))
    return max(kl, 0.0), tv  # rounding can leave a hair below 0 where the two agree


def divergences(engine: Sequence[Any], trainer: Sequence[Any]) -> dict[str, float]:
    """Token mean and max of the KL and total variation over paired positions; empty when
    there are none."""
    import numpy as np

    if len(engine) != len(trainer):
        raise ValueError(f"{len(engine)} engine positions against {len(trainer)} trainer ones")
    if not engine:
        return {}
    pairs = [position(e, t) for e, t in zip(engine, trainer, strict=True)]
    kl = np.array([p[0] for p in pairs])
    tv = np.array([p[1] for p in pairs])
    finite = np.isfinite(kl)
    return {
        "full_kl_mean": float(kl.mean()),
        "full_kl_max": float(kl.max()),
        "full_tv_mean": float(tv.mean()),
        "full_tv_max": float(tv.max()),
        "full_kl_finite_mean": float(kl[finite].mean()) if finite.any() else float("nan"),
        "full_support_mismatch_rate": float(1.0 - finite.mean()),
    }
