"""Sampler-only settings: what a run's config says the rollout engine applies and the trainer
does not — a mismatch there from the first step, whatever the signals show.

A repetition, presence or frequency penalty, a top-k, top-p or min-p, and a temperature beside
raw logprobs change the distribution the rollout samples from (and reports the logprobs of),
while the trainer recomputes logprobs from the plain logits: the two disagree on every step. On
a small model the gap can sit inside the range healthy runs of larger ones show (on this CPU's
tiny model a repetition penalty of 1.1 reads a mean |d| of 0.028, where healthy bf16 runs in the
field reach 0.05), so no level that spares every healthy run catches it; the config does.

The server records what it finds as a run label, `SAMPLER_ONLY_LABEL` ("repetition_penalty=1.1"),
recomputed whenever the config changes, so the runs list and run page show it and rules select
on it with their ordinary label filter: the default pack watches such runs at tighter levels
(`server/alarms/configuring/defaults.py`). The label is the server's: a client's value under that
key is replaced by what the config says.

Keys are matched by the last component of their dotted path (`parity.flatten`), as the parity
table is; paths through a validation or evaluation block (verl's `val_kwargs`, an `eval_*`
section) are skipped, since those settings never touch the rollouts trained on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from server.domain import parity

SAMPLER_ONLY_LABEL = "mismatch.sampler_only"
"""The run label naming a run's sampler-only settings (absent when there are none)."""

_MAX_LABEL = 200  # the ingest contract's longest label value


def _number(text: str) -> float | None:
    try:
        value = float(text.strip('"'))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _not(neutral: float) -> Callable[[float], bool]:
    return lambda value: value != neutral


# leaf name → whether a value is active. top_k ≤ 0 and top_p ≥ 1 mean off in vLLM, SGLang, TRL
# and HF generate alike.
_ACTIVE: dict[str, Callable[[float], bool]] = {
    "repetition_penalty": _not(1.0),
    "presence_penalty": _not(0.0),
    "frequency_penalty": _not(0.0),
    "top_k": lambda value: value > 0,
    "top_p": lambda value: 0 < value < 1,
    "min_p": lambda value: value > 0,
}
SETTINGS: tuple[str, ...] = ("temperature", *_ACTIVE)
"""The leaf names of the settings `active` judges."""
_SKIPPED = ("val_", "eval", "validation", "test")  # path components of a validation block


def _skipped(path: str) -> bool:
    parts = [part.lower() for part in path.split(".")[:-1]]
    return any(part == "val" or part.startswith(_SKIPPED) for part in parts)


def raw_logprobs(flat: Mapping[str, str]) -> bool:
    """Whether a flattened config (`parity.flatten`) says the rollout reports raw logprobs."""
    return any(
        k.rsplit(".", 1)[-1] == "logprobs_mode" and "raw" in v.lower() for k, v in flat.items()
    )


def active(leaf: str, text: str, *, raw: bool) -> bool | None:
    """Whether a recorded setting (its leaf name and value) makes the rollout sample from
    another distribution than the trainer scores: True, False where it is at its neutral
    value, None where it is no sampler-only setting here or names no number. A temperature
    counts only beside raw logprobs: with processed ones the trainer applies the same
    temperature, beside raw ones the rollout reports logprobs of a distribution it did not
    sample from."""
    judge = _ACTIVE.get(leaf)
    if judge is None and not (leaf == "temperature" and raw):
        return None
    value = _number(text)
    if value is None:
        return None
    return value != 1 if judge is None else judge(value)


def sampler_only(config: Mapping[str, Any]) -> list[str]:
    """The sampler-only settings `config` records, as `leaf=value`, in the config's key order
    (a setting recorded twice, say by trainer and engine, once)."""
    flat = {k: v for k, v in parity.flatten(config).items() if not _skipped(k)}
    raw = raw_logprobs(flat)
    found: dict[str, str] = {}
    for key, text in flat.items():
        leaf = key.rsplit(".", 1)[-1]
        if leaf not in found and active(leaf, text, raw=raw):
            found[leaf] = f"{leaf}={text}"
    return list(found.values())


def derived_labels(config: Mapping[str, Any]) -> dict[str, str]:
    """The labels the server derives from a run's config: `SAMPLER_ONLY_LABEL` when the config
    records a sampler-only setting, else none."""
    settings = sampler_only(config)
    if not settings:
        return {}
    text = ", ".join(settings)
    if len(text) > _MAX_LABEL:
        text = text[: _MAX_LABEL - 1] + "…"
    return {SAMPLER_ONLY_LABEL: text}


def with_derived(labels: Mapping[str, str], derived: Mapping[str, str]) -> dict[str, str]:
    """A client's labels with the server's derived ones in place of any it sent under their
    keys."""
    return {**{k: v for k, v in labels.items() if k != SAMPLER_ONLY_LABEL}, **derived}


def derived_of(labels: Mapping[str, str]) -> dict[str, str]:
    """The derived labels among stored ones (kept when an update brings no config)."""
    return {k: v for k, v in labels.items() if k == SAMPLER_ONLY_LABEL}
