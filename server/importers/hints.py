"""What an import says about each run: the mismatch signal it stored, or — when none — the
names it kept that look like one, each with the `--map` that would store it as a signal; and,
for `--framework auto`, which framework's names a run logs.

Pure functions over metric names. A suggestion is a suggestion: the name says what a value
likely measures, not how it was computed, so the summary asks the user to check the formula
(METRICS.md) before passing the map.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from collectors.adapters import detect
from server.domain.signals import SIGNALS

_RANK = {signal.metric: i for i, signal in enumerate(SIGNALS)}

_GAP = re.compile(r"vllm|rollout|sampl|infer|mismatch|behav|train_inf|actor_vs|engine")
"""Words that say a KL or ratio is between the rollout engine and the trainer (not the
reference-policy KL or the PPO ratio every trainer also logs)."""

_RULES: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    # (pattern on the lower-cased name, canonical target, needs a _GAP word)
    (re.compile(r"(^|[^a-z])k3"), "k3_kl", True),
    (re.compile(r"(^|[^a-z])k2"), "k2_kl", True),
    (re.compile(r"(^|[^a-z])k1"), "k1_kl", True),
    (re.compile(r"(log_?p|logprob)s?_?(diff|difference|gap)"), "abs_logp_diff_mean", False),
    (re.compile(r"importance|is_?ratio|is_?weight"), "ratio_mean", False),
    (re.compile(r"ratio"), "ratio_mean", True),
    (re.compile(r"kl"), "k1_kl", True),
)
"""A name that says "kl" with an engine word and no estimator is taken for k1, the mean log
ratio: what the forks that log `vllm_kl` compute (`training/vllm_kl`, OpenRLHF's `vllm_kl`)."""


def signals(stored: Iterable[str]) -> list[str]:
    """The mismatch signals among stored metric names, strongest first (the alarms' ranking)."""
    return sorted((n for n in set(stored) if n in _RANK), key=_RANK.__getitem__)


_KNOWN = {"vllm_kl": "k1_kl", "mismatch_kl": "k3_kl"}
"""Fork names by what their code computes: `vllm_kl` (OpenRLHF, and the verl forks that log
`training/vllm_kl`) is the mean of log p_rollout − log p_trainer, k1; prime-rl's `mismatch_kl`
is k3."""

_SKIP = re.compile(r"(^|[/_])(max|min|std|p\d+)($|[/_])")
"""Max-, min- and spread-type names are never a run's signal (see `server.domain.signals`)."""


def lookalikes(kept: Iterable[str]) -> list[tuple[str, str]]:
    """Kept names that look like a mismatch signal, each with the signal to map it to (only
    names a mapping would make the run's signal: never a max, min or spread)."""
    out: list[tuple[str, str]] = []
    for name in sorted(set(kept)):
        low = name.lower()
        tail = low.rsplit("/", 1)[-1]
        if tail in _KNOWN:
            out.append((name, _KNOWN[tail]))
            continue
        if _SKIP.search(low):
            continue
        for pattern, target, needs_gap in _RULES:
            if pattern.search(low) and (not needs_gap or _GAP.search(low)):
                if target in _RANK:
                    out.append((name, target))
                break
    return out


def map_option(pairs: list[tuple[str, str]]) -> str:
    """The `--map` options for pairs, quoted for a shell where a name needs it."""
    return " ".join(f"--map {_quoted(f'{name}={target}')}" for name, target in pairs)


def _quoted(text: str) -> str:
    return shlex.quote(text)


def resolve_framework(names: Iterable[str], framework: str | None) -> tuple[str | None, str]:
    """The framework a run's names go through, and for "auto" (`--framework auto`) a note of
    what was decided from its names (`collectors.adapters.detect`: a framework's own names
    first, then every name it knows, a name k frameworks know counting 1/k)."""
    if framework != "auto":
        return framework, ""
    found, tied = detect(names)
    if found is not None:
        return found, f"framework {found} (told from its names)"
    if tied:
        return None, (
            f"framework not told apart ({' or '.join(tied)} know the same names): names kept "
            "as they are; pass --framework"
        )
    return None, "no framework's names found: names kept as they are"
